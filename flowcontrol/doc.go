// Package flowcontrol is an admission queue for LLM inference gateways: it holds requests
// in flows and priority bands in front of saturated model servers and decides who goes
// next, through a pluggable Policy.
package flowcontrol

// Package quota enforces per-tenant limits on requests and tokens per window, alone on one gateway
// or shared across replicas through a [Shared] store.
package quota

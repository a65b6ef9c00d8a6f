//go:build race

package lora_test

func init() { raceEnabled = true }

//go:build !unix

package flowcontrol_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }

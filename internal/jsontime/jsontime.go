// Package jsontime reads durations written as strings in JSON ("60s"), as usher's
// configuration files and registry parameters write them.
package jsontime

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that JSON gives as a string time.ParseDuration reads.
type Duration time.Duration

// UnmarshalJSON reads a string such as "60s"; anything else is an error saying so.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"60s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

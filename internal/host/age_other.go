//go:build !linux

package host

import (
	"errors"
	"time"
)

// Age is unknown off Linux.
func Age(int) (time.Duration, error) { return 0, errors.New("process age: Linux only") }

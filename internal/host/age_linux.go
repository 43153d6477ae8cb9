package host

import (
	"time"

	"golang.org/x/sys/unix"
)

// Age is how long ago pid started, to a clock tick (10 ms): the boot
// clock now less its start time, which the kernel keeps on that clock.
func Age(pid int) (time.Duration, error) {
	ticks, err := StartTime(pid)
	if err != nil {
		return 0, err
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &now); err != nil {
		return 0, err
	}
	return time.Duration(now.Nano()) - time.Duration(ticks)*time.Second/userHZ, nil
}

package mounts

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ProbeRecursiveReadOnly reports whether this kernel has mount_setattr(2)
// with AT_RECURSIVE (Linux ≥ 5.12), which recursive read-only ("rro")
// needs. It asks mount_setattr to set MOUNT_ATTR_RDONLY on fd -1, which
// can change nothing: EBADF means the syscall exists, ENOSYS that it does
// not. When the caller may not mount (EPERM) the answer falls back to the
// kernel release. The runtime must also know the option (runc ≥ 1.1); an
// older runc fails to start the container rather than run it unprotected.
func ProbeRecursiveReadOnly() bool {
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	switch {
	case err == nil, errors.Is(err, unix.EBADF):
		return true
	case errors.Is(err, unix.ENOSYS):
		return false
	}
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 12)
}

// releaseAtLeast reports whether a kernel release string ("6.18.44-fc")
// is at least major.minor. An unparsable release is not.
func releaseAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(leadingDigits(parts[1]))
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && mnr >= minor)
}

func leadingDigits(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		return s
	}
	return s[:i]
}

// HostFeatures probes the features MountPlan needs on this host.
func HostFeatures() Features {
	return Features{RecursiveReadOnly: ProbeRecursiveReadOnly()}
}

package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// daemonScript leaves a daemon the way a careless host-side helper does:
// `daemon MARKER PIDFILE` returns at once; its child calls setsid (a
// session and process group of its own) and forks again, and the
// grandchild, orphaned, ignoring SIGTERM, SIGINT and SIGHUP, writes its pid
// to PIDFILE and becomes `sleep 3600` with MARKER as its argv[0].
const daemonScript = `#!/bin/bash
case "$3" in
"") setsid "$0" "$1" "$2" session </dev/null >/dev/null 2>&1 & ;;
session) "$0" "$1" "$2" sleeper & ;;
sleeper) trap '' TERM INT HUP; echo $$ > "$2.tmp"; mv "$2.tmp" "$2"; exec -a "$1" sleep 3600 ;;
esac
`

// DaemonScript writes the daemon script into dir and returns its path.
func DaemonScript(t testing.TB, dir string) string {
	t.Helper()
	p, err := WriteDaemonScript(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteDaemonScript is DaemonScript for a test binary's child process,
// which has no testing.T.
func WriteDaemonScript(dir string) (string, error) {
	p := filepath.Join(dir, "daemon")
	if err := os.WriteFile(p, []byte(daemonScript), 0o755); err != nil {
		return "", err
	}
	return p, os.Chmod(p, 0o755) // not subject to umask
}

// ReadPidFile waits up to timeout for a pid in file and returns it.
func ReadPidFile(t testing.TB, file string, timeout time.Duration) int {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		if data, err := os.ReadFile(file); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s after %v", file, timeout)
			return 0
		}
	}
}

// Survived reports whether process pid still runs after timeout (a zombie
// has exited). A survivor is killed, so that a failing test leaves nothing
// behind; the caller reports it.
func Survived(t testing.TB, pid int, timeout time.Duration) bool {
	t.Helper()
	return !exitedWithin(t, pid, timeout, true)
}

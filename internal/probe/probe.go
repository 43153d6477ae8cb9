// Package probe reports what a process sees of its sandbox: its argv, the
// names of its environment, its ids, the mount and writability of given
// paths, whether given TCP addresses answer, and the limits visible from
// inside (cgroup memory and pids, the run dir's size and inodes). The
// scripted engine prints it as one NDJSON event (the probe step), so a test
// can compare what `hookbox run` and a Kubernetes Job give the same spec
// (cluster/parity_test.go). It reports names, never environment values.
package probe

import (
	"bufio"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Report is what the probe saw.
type Report struct {
	Type   string   `json:"type"` // always "probe"
	Argv   []string `json:"argv"`
	Env    []string `json:"env"` // names only, sorted
	UID    int      `json:"uid"`
	GID    int      `json:"gid"`
	Groups []int    `json:"groups"`
	// Status holds the /proc/self/status lines that say how the process is
	// confined: CapEff, CapBnd, NoNewPrivs, Seccomp.
	Status     map[string]string `json:"status"`
	Paths      []Path            `json:"paths"`
	Dial       []Dial            `json:"dial"`
	Interfaces []string          `json:"interfaces"` // name and addresses, e.g. "lo 127.0.0.1/8"
	Limits     map[string]string `json:"limits"`
}

// Path is one probed path: whether it exists, whether a file can be
// created in it (a directory) or opened for writing (a file), and the
// mount it is on (its mount point, type and options).
type Path struct {
	Path       string `json:"path"`
	Exists     bool   `json:"exists"`
	Writable   bool   `json:"writable"`
	Mount      string `json:"mount,omitempty"`
	FSType     string `json:"fstype,omitempty"`
	MountFlags string `json:"mount_flags,omitempty"` // per-mount options: ro/rw, nosuid, nodev, noexec, …
}

// Dial is one TCP connection attempt.
type Dial struct {
	Address string `json:"address"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

// statusKeys are the /proc/self/status fields Report keeps.
var statusKeys = []string{"CapEff", "CapBnd", "NoNewPrivs", "Seccomp"}

// limitFiles are the files a limit can be read from, cgroup v2 first,
// then v1's per-controller hierarchies.
var limitFiles = map[string][]string{
	"memory": {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
	"pids":   {"/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"},
	"cpu":    {"/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"},
}

// Run probes paths (created in, when a directory) and dials each address
// with timeout. statfsOf lists the directories whose size and inode count
// go into Limits.
func Run(paths, dial, statfsOf []string, timeout time.Duration) Report {
	r := Report{Type: "probe", Argv: os.Args, UID: os.Getuid(), GID: os.Getgid(), Status: map[string]string{}, Limits: map[string]string{}}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		r.Env = append(r.Env, name)
	}
	slices.Sort(r.Env)
	r.Groups, _ = os.Getgroups()
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && slices.Contains(statusKeys, k) {
				r.Status[k] = strings.TrimSpace(v)
			}
		}
	}
	mounts := readMounts()
	for _, p := range paths {
		r.Paths = append(r.Paths, probePath(p, mounts))
	}
	for _, a := range dial {
		d := Dial{Address: a}
		conn, err := net.DialTimeout("tcp", a, timeout)
		if err == nil {
			conn.Close()
			d.OK = true
		} else {
			d.Error = dialError(err)
		}
		r.Dial = append(r.Dial, d)
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifc := range ifs {
			s := ifc.Name
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				s += " " + a.String()
			}
			r.Interfaces = append(r.Interfaces, s)
		}
	}
	for name, files := range limitFiles {
		for _, f := range files {
			if data, err := os.ReadFile(f); err == nil {
				r.Limits[name] = strings.TrimSpace(string(data))
				break
			}
		}
	}
	for _, dir := range statfsOf {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			r.Limits[dir+" bytes"] = strconv.FormatUint(st.Blocks*uint64(st.Bsize), 10)
			r.Limits[dir+" inodes"] = strconv.FormatUint(st.Files, 10)
		}
	}
	return r
}

// dialError is the errno's text when there is one ("connection refused",
// "network is unreachable"), so reports from two sandboxes compare.
func dialError(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

type mount struct {
	point, fstype, flags string
}

// readMounts reads /proc/self/mountinfo: mount point, type and the
// per-mount options of each mount, in order.
func readMounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - type source super
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 6 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: unescape(fields[4]), flags: fields[5], fstype: fields[sep+1]})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// probePath reports p and the last (topmost) mount whose point contains it.
func probePath(p string, mounts []mount) Path {
	out := Path{Path: p}
	fi, err := os.Stat(p)
	if err != nil {
		return out
	}
	out.Exists = true
	for _, m := range mounts {
		if p == m.point || m.point == "/" || strings.HasPrefix(p, strings.TrimSuffix(m.point, "/")+"/") {
			out.Mount, out.FSType, out.MountFlags = m.point, m.fstype, m.flags
		}
	}
	if fi.IsDir() {
		f, err := os.CreateTemp(p, ".hookbox-probe-*")
		if err == nil {
			out.Writable = true
			f.Close()
			os.Remove(f.Name())
		}
	} else if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
		out.Writable = true
		f.Close()
	}
	return out
}

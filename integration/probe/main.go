// Command probe runs inside a hookbox container and reports, one JSON object
// per line, what the sandbox allows: the adversarial checks of the container
// assembly (writes to read-only mounts, exec from writable places, network,
// identity). It is built static so its runfiles closure is one file.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

type result struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`     // the operation succeeded
	Errno  string `json:"errno"`  // the error's errno name when it failed
	Detail string `json:"detail"` // what was read or observed
}

func report(check string, err error, detail string) {
	r := result{Check: check, OK: err == nil, Detail: detail}
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = errnoName(errno)
		} else {
			r.Errno = err.Error()
		}
	}
	data, _ := json.Marshal(r)
	fmt.Println(string(data))
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EROFS:
		return "EROFS"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOENT:
		return "ENOENT"
	}
	return e.Error()
}

func writeFile(path string) error {
	return os.WriteFile(path, []byte("probe\n"), 0o644)
}

// execCopy copies this binary into dir and tries to run the copy.
func execCopy(dir string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	dst := filepath.Join(dir, "probe-copy")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if _, err := io.Copy(out, self); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	defer os.Remove(dst)
	return exec.Command(dst, "--version").Run()
}

func statusField(name string) string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("probe")
		return
	}
	data, err := os.ReadFile("/workspace/README.md")
	report("read-workspace", err, strings.TrimSpace(string(data)))
	report("write-run-dir", writeFile("/run/hookbox/probe.txt"), "")
	report("write-root", writeFile("/probe.txt"), "")
	report("write-workspace", writeFile("/workspace/probe.txt"), "")
	self, _ := os.Executable()
	report("write-runfiles", writeFile(filepath.Join(filepath.Dir(self), "probe.txt")), self)
	report("replace-runfile", writeFile(self), self)
	report("write-config", writeFile("/hookbox/etc/probe.txt"), "")
	report("exec-run-dir", execCopy("/run/hookbox"), "")
	report("exec-tmp", execCopy("/tmp"), "")
	report("exec-dev-shm", execCopy("/dev/shm"), "")

	ifaces, err := net.Interfaces()
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	report("interfaces", err, strings.Join(names, ","))
	_, err = net.Dial("tcp", "192.0.2.1:80")
	report("dial-out", err, "")

	report("uid", nil, fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()))
	report("cap-eff", nil, statusField("CapEff"))
	report("cap-bnd", nil, statusField("CapBnd"))
	report("no-new-privs", nil, statusField("NoNewPrivs"))
	report("seccomp", nil, statusField("Seccomp"))
	host, err := os.Hostname()
	report("hostname", err, host)
	entries, err := os.ReadDir("/")
	var root []string
	for _, e := range entries {
		root = append(root, e.Name())
	}
	report("root-entries", err, strings.Join(root, ","))
}

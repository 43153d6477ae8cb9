// Package shimfront is the runtime binary hookbox's runs name in place of
// io.containerd.runc.v2 (bin/containerd-shim-hookbox-v2, an absolute path,
// which containerd runs as it would containerd-shim-runc-v2).
//
// containerd runs its runtime binary three ways: `start` once per task,
// the serving shim that start leaves behind, and `delete` whenever its
// connection to a task's shim closes, even after the task was deleted
// cleanly, and it waits for that delete before the task's Delete returns.
// Both short-lived commands are a Go program's start plus a runc run each
// (~4 and ~7 ms of a trivial run's ~90 here). The front answers them
// itself when the answer is already known and doing it would change
// nothing; for everything else, and whenever it is unsure, it execs
// containerd-shim-runc-v2 with the same arguments, so every shim that
// serves a task is runc's own and every real cleanup is runc's own.
//
//   - delete, when runc has no state for the task and its bundle's rootfs
//     is absent or an empty directory that is no mount: runc's delete
//     would fail on the missing state and unmount nothing. The front
//     prints the same answer (the init's pid, status 137, now).
//   - start, for a task of a shim group (AnnotationGroup) whose shim
//     answers at the group's socket and was started for the group's
//     first task, named as the group (hookbox's anchor), by a containerd
//     that takes a plain address as start's answer (1.x: no bootstrap.json
//     in that task's bundle). The front writes the bundle's address file
//     and prints the address, as runc's start does when it joins a group.
//
// It imports nothing of hookbox's and little of Go's: it runs on every
// task's start and delete.
package shimfront

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
)

// Binary is the front's file name: make build puts it next to bin/hookbox.
const Binary = "containerd-shim-hookbox-v2"

// RuncShim is the shim the front hands every other command to.
const RuncShim = "containerd-shim-runc-v2"

// AnnotationGroup puts a task in a shim group: runc's start joins the
// shim serving the group's socket instead of starting one.
const AnnotationGroup = "io.containerd.runc.v2.group"

// SocketDir is where shims listen, whatever containerd's state directory.
const SocketDir = "/run/containerd/s"

// defaultRuncRoot is runc's state root when a bundle's options name none.
const defaultRuncRoot = "/run/containerd/runc"

// Socket is the socket the shim of task (or group) id in namespace
// listens on for the containerd at socketPath (a path, no unix://):
// containerd names it by the sha256 of "<socketPath>/<namespace>/<id>".
func Socket(socketPath, namespace, id string) string {
	return socketIn(SocketDir, socketPath, namespace, id)
}

// socketIn is Socket with the shims' socket directory given (tests).
func socketIn(dir, socketPath, namespace, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(socketPath, namespace, id)))
	return filepath.Join(dir, hex.EncodeToString(sum[:]))
}

// Command is a shim command line as containerd writes it.
type Command struct {
	Namespace, ID, Address string
	Action                 string // start, delete; "" for the serving shim
}

// ParseArgs reads a shim's arguments (without the program name). ok is
// false when namespace, id or address is missing or a flag lacks its value.
func ParseArgs(args []string) (c Command, ok bool) {
	flags := map[string]*string{"namespace": &c.Namespace, "id": &c.ID, "address": &c.Address}
	for i := 0; i < len(args); i++ {
		name := strings.TrimLeft(args[i], "-")
		if name == args[i] {
			c.Action = args[i] // the first non-flag is the action; it ends the flags
			break
		}
		value, inline := "", false
		if n, v, found := strings.Cut(name, "="); found {
			name, value, inline = n, v, true
		}
		p, known := flags[name]
		if !known {
			if !inline && name != "debug" && name != "v" && i+1 < len(args) {
				i++ // every other flag of the shim takes a value
			}
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				return c, false
			}
			i++
			value = args[i]
		}
		*p = value
	}
	return c, c.Namespace != "" && c.ID != "" && c.Address != ""
}

// Main runs the front: args are its arguments (without the program
// name), cwd the directory containerd ran it in (the task's bundle).
// It returns only when it answered itself or failed to exec the shim.
func Main(args []string, cwd string, stdout, stderr io.Writer) int {
	c, ok := ParseArgs(args)
	if ok {
		switch c.Action {
		case "delete":
			if answer, done := deleted(cwd, c.Namespace, c.ID, time.Now()); done {
				if _, err := stdout.Write(answer); err == nil {
					return 0
				}
			}
		case "start":
			if address, done := joined(cwd, c.Namespace, c.Address, SocketDir); done {
				if _, err := io.WriteString(stdout, address); err == nil {
					return 0
				}
			}
		}
	}
	shim, err := runcShim()
	if err == nil {
		err = unix.Exec(shim, append([]string{shim}, args...), os.Environ())
	}
	fmt.Fprintf(stderr, "%s: cannot run %s: %v\n", Binary, RuncShim, err)
	return 1
}

// runcShim finds containerd-shim-runc-v2 as containerd finds it for
// io.containerd.runc.v2: on PATH (containerd's, which the front
// inherits), else next to containerd's own binary (the front's parent).
func runcShim() (string, error) {
	if p, err := exec.LookPath(RuncShim); err == nil {
		return filepath.Abs(p)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", os.Getppid()))
	if err != nil {
		return "", fmt.Errorf("not on PATH, and containerd's binary: %w", err)
	}
	p := filepath.Join(filepath.Dir(exe), RuncShim)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("neither on PATH nor next to %s", exe)
	}
	return p, nil
}

// deleted is delete's answer when runc's delete would do nothing: the
// bundle is the task's (next to cwd, as runc's shim finds it), runc has
// no state for the task under the bundle's root, and the bundle's rootfs
// is absent or an empty directory that is not a mount (so nothing is
// mounted at or under it). done is false whenever that is not certain.
func deleted(cwd, namespace, id string, now time.Time) (answer []byte, done bool) {
	bundle := filepath.Join(filepath.Dir(cwd), id)
	root, ok := runcRoot(bundle)
	if !ok {
		return nil, false
	}
	if _, err := os.Lstat(filepath.Join(root, namespace, id)); !errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if !unmounted(filepath.Join(bundle, "rootfs")) {
		return nil, false
	}
	return deleteResponse(initPID(bundle), 128+int(unix.SIGKILL), now), true
}

// runcRoot is the runc state root of bundle's task: its options.json's
// root, else runc's default.
func runcRoot(bundle string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(bundle, "options.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return defaultRuncRoot, true
	}
	var opts struct {
		Root string `json:"root"`
	}
	if err != nil || json.Unmarshal(data, &opts) != nil {
		return "", false
	}
	if opts.Root == "" {
		return defaultRuncRoot, true
	}
	return opts.Root, true
}

// unmounted: path is absent, or an empty directory that the kernel says
// is no mount's root (statx STATX_ATTR_MOUNT_ROOT, Linux 5.8+; an older
// kernel does not say, and the answer is false).
func unmounted(path string) bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE, &st)
	if errors.Is(err, unix.ENOENT) {
		return true
	}
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR ||
		st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return false
	}
	d, err := os.Open(path)
	if err != nil {
		return false
	}
	defer d.Close()
	_, err = d.Readdirnames(1)
	return err == io.EOF
}

// initPID is the pid in bundle's init.pid, 0 when there is none (as
// runc's shim reads it).
func initPID(bundle string) int {
	data, err := os.ReadFile(filepath.Join(bundle, "init.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil {
		return 0
	}
	return pid
}

// deleteResponse is the shim API's DeleteResponse {pid = 1, exit_status
// = 2, exited_at = 3 (google.protobuf.Timestamp {seconds = 1, nanos =
// 2})} in protobuf's wire format, which delete prints.
func deleteResponse(pid, status int, exitedAt time.Time) []byte {
	var ts []byte
	if s := exitedAt.Unix(); s != 0 {
		ts = protowire.AppendTag(ts, 1, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(s))
	}
	if n := exitedAt.Nanosecond(); n != 0 {
		ts = protowire.AppendTag(ts, 2, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(n))
	}
	var b []byte
	if pid > 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(pid))
	}
	if status != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(status))
	}
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, ts)
}

// joined is start's answer for a task that joins a live shim group:
// cwd's config.json puts it in group G, the shim at G's socket (in
// socketDir) answers, and the bundle of the task named G beside cwd says
// that shim is G's (its address file) and was started by a containerd
// that reads a plain address (no bootstrap.json: containerd 2 writes
// one for every shim it starts, and wants its own answer format). Like
// runc's start in that case it writes the bundle's address file.
func joined(cwd, namespace, address, socketDir string) (string, bool) {
	group := SpecGroup(cwd)
	if group == "" || strings.ContainsRune(group, '/') || group == "." || group == ".." {
		return "", false
	}
	answer := "unix://" + socketIn(socketDir, address, namespace, group)
	first := filepath.Join(filepath.Dir(cwd), group)
	if got, err := os.ReadFile(filepath.Join(first, "address")); err != nil || string(got) != answer {
		return "", false
	}
	if _, err := os.Lstat(filepath.Join(first, "bootstrap.json")); !errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if !answers(strings.TrimPrefix(answer, "unix://")) {
		return "", false
	}
	if err := writeAtomic(filepath.Join(cwd, "address"), answer); err != nil {
		return "", false
	}
	return answer, true
}

// SpecGroup is the shim group the spec in bundle (its config.json) puts
// its task in (AnnotationGroup), "" for a task with a shim of its own or
// a bundle without a spec.
func SpecGroup(bundle string) string {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return ""
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(data, &spec) != nil {
		return ""
	}
	return spec.Annotations[AnnotationGroup]
}

// answers: something accepts a connection at the unix socket path.
func answers(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path}) == nil
}

// writeAtomic writes data to path through a temporary beside it.
func writeAtomic(path, data string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

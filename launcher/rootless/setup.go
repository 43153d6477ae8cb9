package rootless

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/cgroup"
)

// SubtreeParent is the cgroup under which Setup delegates one subtree per
// user, /hookbox-rootless/<uid>, on hosts where nothing delegates one
// (no systemd user manager, or a hybrid host such as Debian 12's).
const SubtreeParent = "/hookbox-rootless"

// SessionDir is the cgroup, inside a delegated subtree, that a user's
// processes (shell, hookbox, the rootless containerd) start in; runs go to
// the subtree's jobs directory.
const SessionDir = "session"

// subIDsNeeded: the container's uid and gid 65532 must be mapped, so the
// user needs this many subordinate ids after its own.
const subIDsNeeded = 65533

// Setup is what `hookbox rootless setup` prepared for one user.
type Setup struct {
	User       *user.User
	UID, GID   int
	Subtree    string // cgroup path of the delegated subtree
	Session    string // cgroup path of its session cgroup
	RuntimeDir string // the user's XDG_RUNTIME_DIR
	Notes      []string
}

// Prepare, as root, makes a host ready for username's rootless hookbox:
// checks subordinate ids and the tools, creates the user's runtime
// directory if no login manager did, and creates and chowns the cgroup2
// subtree /hookbox-rootless/<uid> with its session and jobs cgroups. It is
// idempotent.
func Prepare(username string) (*Setup, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("hookbox rootless setup runs as root (sudo): it creates a cgroup subtree and hands it to the user")
	}
	u, err := user.Lookup(username)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", username, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 {
		return nil, errors.New("rootless setup is for a non-root user: root runs hookbox rootful")
	}
	s := &Setup{User: u, UID: uid, GID: gid}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		n, err := subIDs(f, u.Username, u.Uid)
		if err != nil || n < subIDsNeeded {
			return nil, fmt.Errorf("%s gives %s %d subordinate ids, need %d: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s", f, u.Username, n, subIDsNeeded, u.Username)
		}
	}
	for _, tool := range []string{"rootlesskit", "newuidmap", "newgidmap", "nsenter", "containerd", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s is not on PATH: apt-get install containerd runc rootlesskit uidmap", tool))
		}
	}
	s.RuntimeDir = filepath.Join("/run/user", u.Uid)
	if err := os.MkdirAll("/run/user", 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.RuntimeDir, 0o700); err == nil {
		if err := os.Chown(s.RuntimeDir, uid, gid); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, err
	}

	s.Subtree = path.Join(SubtreeParent, u.Uid)
	s.Session = path.Join(s.Subtree, SessionDir)
	for _, p := range []string{SubtreeParent, s.Subtree, s.Session, path.Join(s.Subtree, cgroup.JobsDir)} {
		dir, err := cgroup.UnifiedDir(p)
		if err != nil {
			return nil, fmt.Errorf("rootless setup needs cgroup2: %w", err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if p == SubtreeParent || p == s.Subtree {
			// Pass on what the host offers down to the user's subtree, whose
			// jobs directory passes it on to runs. Never in session: a
			// cgroup2 directory with controllers enabled holds no process.
			enableAvailable(dir)
		}
		if p != SubtreeParent {
			if err := chownDelegated(dir, uid, gid, p == s.Subtree); err != nil {
				return nil, err
			}
		}
	}
	if jobs, err := cgroup.UnifiedDir(path.Join(s.Subtree, cgroup.JobsDir)); err != nil || len(controllersOf(jobs)) == 0 {
		s.Notes = append(s.Notes, "no cgroup controller reaches the subtree (v1 controllers are not delegated on a hybrid host): runs get a cgroup of their own, and so a trace, but no memory, pids or CPU limit")
	}
	return s, nil
}

// controllersOf is what cgroup2 directory dir offers; none when it
// cannot be read.
func controllersOf(dir string) []string {
	names, _ := host.ReadCgroupControllers(dir)
	return names
}

// enableAvailable enables in dir's subtree every controller it offers;
// what the kernel refuses is left off.
func enableAvailable(dir string) {
	for _, c := range controllersOf(dir) {
		if c == "memory" || c == "pids" || c == "cpu" {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
}

// chownDelegated hands dir to the user as systemd's Delegate=yes does: the
// directory and, at the subtree's root, the files a delegatee writes
// (cgroup.procs, cgroup.threads, cgroup.subtree_control); below the root,
// every file.
func chownDelegated(dir string, uid, gid int, root bool) error {
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		n := e.Name()
		if root && n != "cgroup.procs" && n != "cgroup.threads" && n != "cgroup.subtree_control" {
			continue
		}
		if err := os.Chown(filepath.Join(dir, n), uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// subIDs counts the subordinate ids /etc/subuid or /etc/subgid gives to a
// user (by name or uid).
func subIDs(file, name, uid string) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return countSubIDs(bufio.NewScanner(f), name, uid), nil
}

func countSubIDs(sc *bufio.Scanner, name, uid string) int {
	total := 0
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || (f[0] != name && f[0] != uid) {
			continue
		}
		if n, err := strconv.Atoi(f[2]); err == nil && n > 0 {
			total += n
		}
	}
	return total
}

// Command starts argv as the user inside the session cgroup (placed there
// at clone time), with HOME, USER, LOGNAME and XDG_RUNTIME_DIR set for the
// user and the rest of the environment kept. It is how a host without a
// login manager that delegates cgroups starts a session hookbox can use.
func (s *Setup) Command(argv []string) (*exec.Cmd, func(), error) {
	dir, err := cgroup.UnifiedDir(s.Session)
	if err != nil {
		return nil, nil, err
	}
	cg, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	groups := []uint32{}
	if ids, err := s.User.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.Atoi(g); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HOME="+s.User.HomeDir, "USER="+s.User.Username, "LOGNAME="+s.User.Username,
		"XDG_RUNTIME_DIR="+s.RuntimeDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.GID), Groups: groups},
		UseCgroupFD: true, CgroupFD: int(cg.Fd()),
	}
	return cmd, func() { cg.Close() }, nil
}

package k8s

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"hookbox.dev/hookbox/render"
)

// RunfileMount is one read-only mount of the runfiles image volume: the
// directory SubPath of the image appears at MountPath in the container.
type RunfileMount struct {
	MountPath string
	SubPath   string
}

// BaseImagePaths are the entries of hookbox's base image (images package):
// a runfile mount never covers one of them. A test keeps the list in step
// with images.NewDefinition.
var BaseImagePaths = []string{
	"/dev", "/dev/mqueue", "/dev/pts", "/dev/shm",
	"/etc", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/passwd", "/etc/resolv.conf",
	"/etc/ssl", "/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt",
	"/grants", "/hookbox", "/hookbox/etc",
	"/proc", "/run", "/run/hookbox", "/sys", "/sys/fs", "/sys/fs/cgroup", "/tmp", "/workspace",
}

// maxSymlinkHops bounds symlink resolution inside the manifest, as the
// kernel bounds it (40).
const maxSymlinkHops = 40

// RunfileMounts returns the mounts that make every runfile of r appear at
// its container path, sorted by MountPath.
//
// With a runfiles manifest (hookbox render --runfiles) every file and
// symlink entry is placed; without one (a plan-only render) every program
// path and the init's are. An entry is carried by a mount of its parent directory, unless
// that directory would hide something: "/", a path of the image
// (imagePaths) or a mount of the pod (podMounts), or lies inside a mount of
// the pod: then only a symlink entry can be mounted
// itself, as the directory it resolves to inside the tree (on merged-/usr
// hosts, /bin is "usr/bin"). An image volume mounts directories only
// (containerd refuses a file subPath), so a regular file directly in such a
// directory (e.g. /etc/ld.so.cache) is ErrUnsupported. Mounts below another
// mount are dropped: the outer one carries them.
//
// SubPath is the mount's path in the tree with every symlink of the
// manifest resolved, so the runtime never has to follow one; without a
// manifest it is the path itself.
func RunfileMounts(r *render.Render, imagePaths, podMounts []string) ([]RunfileMount, error) {
	byPath := map[string]render.Runfile{}
	for _, e := range r.Runfiles {
		byPath[e.Path] = e
	}
	type entry struct {
		path    string
		symlink bool
	}
	var entries []entry
	if len(r.Runfiles) > 0 {
		for _, e := range r.Runfiles {
			if e.Type != render.RunfileDir {
				entries = append(entries, entry{e.Path, e.Type == render.RunfileSymlink})
			}
		}
	} else {
		for _, p := range r.Programs {
			entries = append(entries, entry{p.Path, false})
		}
		if r.Init != nil {
			entries = append(entries, entry{r.Init.Path, false})
		}
	}

	hides := func(dir string) bool {
		if dir == "/" {
			return true
		}
		for _, p := range imagePaths {
			if render.Within(p, dir) {
				return true
			}
		}
		for _, m := range podMounts {
			if render.Within(m, dir) || render.Within(dir, m) {
				return true
			}
		}
		return false
	}
	var dirs []string
	for _, e := range entries {
		if !path.IsAbs(e.path) || path.Clean(e.path) != e.path {
			return nil, fmt.Errorf("%w: runfile %q is not an absolute, clean path; fix the render", ErrUnsupported, e.path)
		}
		parent := path.Dir(e.path)
		switch {
		case !hides(parent):
			dirs = append(dirs, parent)
		case e.symlink && !hides(e.path):
			dirs = append(dirs, e.path)
		default:
			return nil, fmt.Errorf("%w: runfile %s lies directly in %s, which the image or another mount of the pod fills, and an image volume can mount directories only; "+
				"build it into the engine image (--image) or keep it out of the closure", ErrUnsupported, e.path, parent)
		}
	}
	slices.SortFunc(dirs, render.ComparePaths)
	dirs = slices.Compact(dirs)

	var out []RunfileMount
	for _, d := range dirs {
		if n := len(out); n > 0 && render.Within(d, out[n-1].MountPath) {
			continue // sorted parents first: the last kept mount is the only candidate parent
		}
		sub := d
		if len(r.Runfiles) > 0 {
			var err error
			if sub, err = resolveInTree(byPath, d); err != nil {
				return nil, err
			}
			if e, ok := byPath[sub]; !ok || e.Type != render.RunfileDir {
				return nil, fmt.Errorf("%w: runfiles directory %s resolves to %s, which is not a directory of the manifest", ErrUnsupported, d, sub)
			}
		}
		out = append(out, RunfileMount{MountPath: d, SubPath: strings.TrimPrefix(sub, "/")})
	}
	return out, nil
}

// resolveInTree follows the manifest's symlinks in p, component by
// component, the way the kernel would inside the tree.
func resolveInTree(byPath map[string]render.Runfile, p string) (string, error) {
	hops := 0
	var resolve func(p string) (string, error)
	resolve = func(p string) (string, error) {
		out := "/"
		for _, c := range strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/") {
			if c == "" {
				continue
			}
			next := path.Join(out, c)
			if e, ok := byPath[next]; ok && e.Type == render.RunfileSymlink {
				if hops++; hops > maxSymlinkHops {
					return "", fmt.Errorf("%w: too many symlinks resolving %s in the runfiles manifest", ErrUnsupported, p)
				}
				target := e.Target
				if !path.IsAbs(target) {
					target = path.Join(out, target)
				}
				resolved, err := resolve(target)
				if err != nil {
					return "", err
				}
				next = resolved
			}
			out = next
		}
		return out, nil
	}
	return resolve(p)
}

//go:build ignore

// hookbox's BPF LSM programs: what the kernel refuses to tasks in the
// cgroups the exec tracer watches (traced_cgroups). Loaded only where the
// BPF LSM is active, on exec.c's maps (hookbox.h).
//
//   - ptrace_access_check, ptrace_traceme: every ptrace-class access of
//     attach strength (ptrace attach, /proc/<pid>/mem, process_vm_readv and
//     _writev, pidfd_getfd, /proc/<pid>/{stack,syscall}...) from a watched
//     task to another process, and PTRACE_TRACEME, fail with EPERM (the
//     kernel turns some into EACCES). Read-strength checks (/proc/<pid>/
//     environ, maps, fd) are left alone; so is a task's access to its own
//     thread group, which the kernel grants before asking any LSM.
//   - bprm_check_security: for watches with WATCH_ENFORCE, an exec whose
//     file is not in allowed_files fails with EPERM before the point of no
//     return: the caller goes on. The hook runs for every file of the exec
//     (a #! script, then its interpreter), so each must be allowed.
//
// Each refusal is an event (EVENT_DENIED, EVENT_PTRACE_DENIED), counted
// like exec.c's: matched, then lost when the ring is full. A refusal never
// depends on ring space.

#include "hookbox.h"
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define MAX_ERRNO 4095

/* kept is the verdict of a BPF LSM program that ran before on the same
 * hook, which these programs keep: a refusal stays one, and the value is
 * within what the verifier lets an LSM program return. */
static __always_inline int kept(int ret)
{
	return ret < 0 && ret >= -MAX_ERRNO ? ret : -EPERM;
}

/* reserve_refusal bumps matched and reserves a header-only event for a
 * refusal, filled with the caller's task; NULL (counted lost) when the
 * ring is full. */
static __always_inline struct event *reserve_refusal(__u64 cookie, __u64 cgid, __u32 slot, __u16 kind)
{
	bump(slot, C_MATCHED);
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(struct event), 0);
	if (!e) {
		bump(slot, C_LOST);
		return NULL;
	}
	e->cookie = cookie;
	e->cgroup_id = cgid;
	e->ino = 0;
	e->dev = 0;
	e->err = EPERM;
	e->argv_len = 0;
	e->argv_size = 0;
	e->filename_size = 0;
	e->filename[0] = 0;
	e->target = 0;
	e->mode = 0;
	e->kind = kind;
	e->flags = 0;
	fill_task(e, (struct task_struct *)bpf_get_current_task());
	return e;
}

SEC("lsm/bprm_check_security")
int BPF_PROG(deny_exec, struct linux_binprm *bprm, int ret)
{
	if (ret != 0)
		return kept(ret);
	__u64 cgid = bpf_get_current_cgroup_id();
	struct watch *w = bpf_map_lookup_elem(&traced_cgroups, &cgid);
	if (!w || !(w->flags & WATCH_ENFORCE))
		return 0;
	__u64 cookie = w->cookie;
	__u32 slot = w->slot;

	__u64 ino = BPF_CORE_READ(bprm, file, f_inode, i_ino);
	__u32 dev = BPF_CORE_READ(bprm, file, f_inode, i_sb, s_dev);
	struct file_key k = {.cgroup_id = cgid, .ino = ino, .dev = dev};
	if (ino != 0 && bpf_map_lookup_elem(&allowed_files, &k))
		return 0;

	bump(slot, C_DENIED);
	/* The syscall's exit must not report it a second time, as a failed
	 * exec. Without a pending entry it does: an extra failed event. */
	__u64 key = bpf_get_current_pid_tgid();
	struct pending_exec *p = bpf_map_lookup_elem(&pending, &key);
	if (p)
		p->denied = 1;

	struct event *e = reserve_refusal(cookie, cgid, slot, EVENT_DENIED);
	if (!e)
		return -EPERM;
	__u16 flags = FLAG_ENFORCED;
	e->ino = ino;
	e->dev = dev;
	if (ino == 0 && dev == 0)
		flags |= FLAG_EXE_UNKNOWN;
	/* The path the exec was asked for, as the kernel holds it (for
	 * execveat: /dev/fd/N or /dev/fd/N/path). */
	const char *filename = BPF_CORE_READ(bprm, filename);
	long n = bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), filename);
	if (n > 0) {
		e->filename_size = n - 1;
		if (n == sizeof(e->filename))
			flags |= FLAG_FILENAME_TRUNCATED;
	} else {
		flags |= FLAG_FILENAME_MISSING;
		bump(slot, C_READ_ERRORS);
	}
	e->flags = flags;
	submit(e);
	return -EPERM;
}

/* refuse_access denies a ptrace-class access from a watched task to the
 * process target and records it. */
static __always_inline int refuse_access(__u32 target, __u32 mode, __u16 flags)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	struct watch *w = bpf_map_lookup_elem(&traced_cgroups, &cgid);
	if (!w)
		return 0;
	__u64 cookie = w->cookie;
	__u32 slot = w->slot;
	bump(slot, C_PTRACE_DENIED);
	struct event *e = reserve_refusal(cookie, cgid, slot, EVENT_PTRACE_DENIED);
	if (!e)
		return -EPERM;
	e->target = target;
	e->mode = mode;
	e->flags = flags;
	submit(e);
	return -EPERM;
}

SEC("lsm/ptrace_access_check")
int BPF_PROG(deny_ptrace, struct task_struct *child, unsigned int mode, int ret)
{
	if (ret != 0)
		return kept(ret);
	if (!(mode & PTRACE_MODE_ATTACH))
		return 0;
	return refuse_access(BPF_CORE_READ(child, tgid), mode, 0);
}

SEC("lsm/ptrace_traceme")
int BPF_PROG(deny_traceme, struct task_struct *parent, int ret)
{
	if (ret != 0)
		return kept(ret);
	return refuse_access(BPF_CORE_READ(parent, tgid), 0, FLAG_TRACEME);
}

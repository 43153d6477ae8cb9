//go:build ignore

// hookbox exec tracer. Records, in the kernel, every exec (and every failed
// execve/execveat) of tasks whose cgroup2 id is armed in traced_cgroups, and
// kills execs of files outside allowed_files for cgroups armed with
// WATCH_ENFORCE. It records; it does not judge.
//
// Every event that cannot be delivered is counted (counters map), both in the
// global slot 0 and in the watch's own slot, so user space can prove that a
// watch saw everything: matched == delivered + lost.
//
// Where the BPF LSM is active, lsm.c denies instead (the exec fails with
// EPERM before this file's programs see it); the kill here is the fallback.
// The maps and the event layout are in hookbox.h.

#include "hookbox.h"

char LICENSE[] SEC("license") = "GPL";

/* Bytes of argv kept per exec event; set by the loader (Options.ArgvCap). */
volatile const __u32 argv_cap = 4096;

/* The syscalls:sys_{enter,exit}_* records (see their tracefs format
 * files): the common header, __syscall_nr padded to 8 bytes, then the
 * arguments or the return value, 8 bytes each. */
struct syscall_enter_ctx {
	__u64 common;
	__s64 nr;
	__u64 args[6];
};

struct syscall_exit_ctx {
	__u64 common;
	__s64 nr;
	__s64 ret;
};

SEC("tracepoint/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	bump_one(0, C_SEEN);

	__u64 cgid = bpf_get_current_cgroup_id();
	struct watch *w = bpf_map_lookup_elem(&traced_cgroups, &cgid);
	if (!w)
		return 0;
	__u64 cookie = w->cookie;
	__u32 slot = w->slot;
	__u32 wflags = w->flags;
	bump(slot, C_MATCHED);

	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct mm_struct *mm = BPF_CORE_READ(task, mm);
	__u16 flags = 0;

	/* The executed file as the new mm maps it: for a #! script this is
	 * the interpreter, for /proc/self/exe re-execs the real binary. */
	struct file *exe = BPF_CORE_READ(mm, exe_file);
	__u64 ino = 0;
	__u32 dev = 0;
	if (exe) {
		ino = BPF_CORE_READ(exe, f_inode, i_ino);
		dev = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
	}
	if (!exe || (ino == 0 && dev == 0))
		flags |= FLAG_EXE_UNKNOWN;

	/* Enforce before anything that can fail (a full ring must never let a
	 * disallowed exec through). The new image has not run a user
	 * instruction yet: the pending SIGKILL is delivered on the way out of
	 * execve. */
	if (wflags & WATCH_ENFORCE) {
		flags |= FLAG_ENFORCED;
		struct file_key k = {.cgroup_id = cgid, .ino = ino, .dev = dev};
		if ((flags & FLAG_EXE_UNKNOWN) || !bpf_map_lookup_elem(&allowed_files, &k)) {
			if (bpf_send_signal(SIGKILL) == 0) {
				flags |= FLAG_KILLED;
				bump(slot, C_KILLED);
			} else {
				flags |= FLAG_KILL_FAILED;
				bump(slot, C_KILL_FAILED);
			}
		}
	}

	__u32 cap = argv_cap;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(struct event) + cap, 0);
	if (!e) {
		bump(slot, C_LOST);
		return 0;
	}

	e->cookie = cookie;
	e->cgroup_id = cgid;
	e->ino = ino;
	e->dev = dev;
	e->err = 0;
	e->target = 0;
	e->mode = 0;
	e->kind = EVENT_EXEC;
	fill_task(e, task);

	/* bprm->filename, as the tracepoint recorded it. */
	__u32 loc = BPF_CORE_READ(ctx, __data_loc_filename);
	long n = bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), (void *)ctx + (loc & 0xffff));
	if (n <= 0) {
		e->filename_size = 0;
		e->filename[0] = 0;
		flags |= FLAG_EXE_UNKNOWN;
	} else {
		e->filename_size = n - 1;
		if ((loc >> 16) > sizeof(e->filename))
			flags |= FLAG_FILENAME_TRUNCATED;
	}

	/* argv as copied onto the new stack by execve: the new image has not
	 * run, so nothing in user space can have changed it yet. */
	__u64 start = BPF_CORE_READ(mm, arg_start);
	__u64 end = BPF_CORE_READ(mm, arg_end);
	__u64 len = end > start ? end - start : 0;
	__u32 size = len > cap ? cap : (__u32)len;
	e->argv_len = len > 0xffffffff ? 0xffffffff : (__u32)len;
	if (len > cap) {
		flags |= FLAG_TRUNCATED;
		bump(slot, C_TRUNCATED);
	}
	if (size > 0 && bpf_probe_read_user(e->argv, size, (void *)start) < 0) {
		size = 0;
		flags |= FLAG_ARGV_UNREADABLE;
	}
	e->argv_size = size;
	if (flags & (FLAG_ARGV_UNREADABLE | FLAG_EXE_UNKNOWN))
		bump(slot, C_READ_ERRORS);
	e->flags = flags;

	submit(e);
	return 0;
}

static __always_inline int enter_exec(const char *filename)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	struct watch *w = bpf_map_lookup_elem(&traced_cgroups, &cgid);
	if (!w)
		return 0;
	__u32 slot = w->slot;
	struct pending_exec p = {.cgroup_id = cgid, .filename = (__u64)filename};
	__u64 key = bpf_get_current_pid_tgid();
	if (bpf_map_update_elem(&pending, &key, &p, BPF_ANY) != 0)
		bump(slot, C_PENDING_DROPPED);
	return 0;
}

static __always_inline int exit_exec(long ret)
{
	__u64 key = bpf_get_current_pid_tgid();
	struct pending_exec *p = bpf_map_lookup_elem(&pending, &key);
	if (ret >= 0) {
		/* Success: sched_process_exec already reported it. (A
		 * non-leader thread's exec changes pid_tgid; its entry is
		 * removed when the watch stops.) */
		if (p)
			bpf_map_delete_elem(&pending, &key);
		return 0;
	}

	if (p && p->denied) {
		/* lsm.c refused it and recorded it as EVENT_DENIED. */
		bpf_map_delete_elem(&pending, &key);
		return 0;
	}
	__u64 cgid = bpf_get_current_cgroup_id();
	struct watch *w = bpf_map_lookup_elem(&traced_cgroups, &cgid);
	if (!w) {
		if (p)
			bpf_map_delete_elem(&pending, &key);
		return 0;
	}
	__u64 cookie = w->cookie;
	__u32 slot = w->slot;
	bump(slot, C_MATCHED);

	struct event *e = bpf_ringbuf_reserve(&events, sizeof(struct event), 0);
	if (!e) {
		bump(slot, C_LOST);
		if (p)
			bpf_map_delete_elem(&pending, &key);
		return 0;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	e->cookie = cookie;
	e->cgroup_id = cgid;
	e->ino = 0;
	e->dev = 0;
	e->err = (__s32)-ret;
	e->argv_len = 0;
	e->argv_size = 0;
	e->target = 0;
	e->mode = 0;
	e->kind = EVENT_FAILED;
	fill_task(e, task);

	__u16 flags = 0;
	e->filename_size = 0;
	e->filename[0] = 0;
	if (p) {
		long n = bpf_probe_read_user_str(e->filename, sizeof(e->filename), (const char *)p->filename);
		bpf_map_delete_elem(&pending, &key);
		if (n > 0) {
			e->filename_size = n - 1;
			if (n == sizeof(e->filename))
				flags |= FLAG_FILENAME_TRUNCATED; /* or exactly PATH_MAX-1 bytes */
		} else {
			flags |= FLAG_FILENAME_MISSING;
			bump(slot, C_READ_ERRORS);
		}
	} else {
		flags |= FLAG_FILENAME_MISSING;
		bump(slot, C_READ_ERRORS);
	}
	e->flags = flags;
	submit(e);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execve")
int enter_execve(struct syscall_enter_ctx *ctx)
{
	return enter_exec((const char *)ctx->args[0]);
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int enter_execveat(struct syscall_enter_ctx *ctx)
{
	return enter_exec((const char *)ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_exit_execve")
int exit_execve(struct syscall_exit_ctx *ctx)
{
	return exit_exec(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_execveat")
int exit_execveat(struct syscall_exit_ctx *ctx)
{
	return exit_exec(ctx->ret);
}

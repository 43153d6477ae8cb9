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
// The layout of struct event is mirrored in ../event.go (decodeEvent); the
// Go tests compare both against the generated execEvent type.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define SIGKILL 9
#define TASK_COMM_LEN 16
#define FILENAME_CAP 4096 /* PATH_MAX, NUL included */
#define MAX_WATCHES 1024  /* watch slots are 1..MAX_WATCHES; slot 0 is the global total */

/* Bytes of argv kept per exec event; set by the loader (Options.ArgvCap). */
volatile const __u32 argv_cap = 4096;

enum event_kind {
	EVENT_EXEC = 1,
	EVENT_FAILED = 2,
};

enum event_flag {
	FLAG_TRUNCATED = 1 << 0,         /* argv longer than argv_cap */
	FLAG_KILLED = 1 << 1,            /* enforce: SIGKILL queued before the image ran */
	FLAG_KILL_FAILED = 1 << 2,       /* enforce: bpf_send_signal failed */
	FLAG_ARGV_UNREADABLE = 1 << 3,   /* argv could not be read */
	FLAG_EXE_UNKNOWN = 1 << 4,       /* mm->exe_file could not be read: dev/ino are 0 */
	FLAG_FILENAME_TRUNCATED = 1 << 5,/* filename longer than FILENAME_CAP-1 */
	FLAG_FILENAME_MISSING = 1 << 6,  /* failed exec whose filename was not recorded or unreadable */
	FLAG_ENFORCED = 1 << 7,          /* the watch was enforcing when this exec happened */
};

enum watch_flag {
	WATCH_ENFORCE = 1 << 0,
};

/* traced_cgroups value: which watch a cgroup belongs to. */
struct watch {
	__u64 cookie; /* copied into every event; routes it to its Watch */
	__u32 slot;   /* index into counters, 1..MAX_WATCHES */
	__u32 flags;  /* enum watch_flag */
};

/* allowed_files key: an executable file allowed in one cgroup. */
struct file_key {
	__u64 cgroup_id;
	__u64 ino;
	__u32 dev; /* kernel-internal dev_t: major << 20 | minor */
	__u32 pad; /* must be zero */
};

struct counter_set {
	__u64 seen;            /* sched_process_exec hits (global slot only) */
	__u64 matched;         /* events attempted for traced cgroups */
	__u64 lost;            /* ring buffer reservations that failed */
	__u64 truncated;       /* exec events whose argv was truncated */
	__u64 killed;          /* execs killed by enforce */
	__u64 kill_failed;     /* enforce wanted a kill and bpf_send_signal failed */
	__u64 read_errors;     /* events with a field the kernel could not read */
	__u64 pending_dropped; /* execve entries whose filename could not be kept */
};

struct event {
	__u64 cookie;
	__u64 cgroup_id;
	__u64 ktime_ns;       /* bpf_ktime_get_boot_ns: CLOCK_BOOTTIME */
	__u64 ino;            /* mm->exe_file->f_inode->i_ino */
	__u32 dev;            /* ...->i_sb->s_dev, kernel-internal encoding */
	__u32 tgid;
	__u32 tid;
	__u32 ppid;           /* real_parent->tgid */
	__u32 uid;            /* real uid in the initial user namespace */
	__s32 err;            /* EVENT_FAILED: errno (positive) */
	__u32 argv_len;       /* arg_end - arg_start: the full argv length */
	__u32 argv_size;      /* bytes of argv[] captured */
	__u32 filename_size;  /* bytes of filename[], NUL excluded */
	__u16 kind;           /* enum event_kind */
	__u16 flags;          /* enum event_flag */
	char comm[TASK_COMM_LEN];
	char filename[FILENAME_CAP];
	char argv[];          /* argv_cap bytes follow for EVENT_EXEC */
};

/* An execve/execveat in flight in a traced cgroup, recorded at syscall
 * entry for the exit handler. Only the filename pointer is kept: the
 * string is read at exit, and only when the call failed. A failed exec
 * leaves the caller's memory as it was, and the kernel has just read the
 * string, so its page is resident (at entry it may not be, and a
 * non-sleepable program cannot fault it in). Copying 4 KiB at every entry
 * cost ~1 us per exec; this costs a map update. */
struct pending_exec {
	__u64 cgroup_id;
	__u64 filename; /* user pointer */
};

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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_WATCHES);
	__type(key, __u64); /* cgroup id */
	__type(value, struct watch);
} traced_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct file_key);
	__type(value, __u8);
} allowed_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_WATCHES + 1);
	__type(key, __u32);
	__type(value, struct counter_set);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* set by the loader (Options.RingSize) */
	__type(value, struct event);  /* BTF for bpf2go -type only */
} events SEC(".maps");

/* In-flight execve calls in traced cgroups, by pid_tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pending_exec);
} pending SEC(".maps");

enum counter_field {
	C_SEEN,
	C_MATCHED,
	C_LOST,
	C_TRUNCATED,
	C_KILLED,
	C_KILL_FAILED,
	C_READ_ERRORS,
	C_PENDING_DROPPED,
};

static __always_inline void bump_one(__u32 slot, enum counter_field f)
{
	struct counter_set *c = bpf_map_lookup_elem(&counters, &slot);
	if (!c)
		return;
	switch (f) {
	case C_SEEN: __sync_fetch_and_add(&c->seen, 1); break;
	case C_MATCHED: __sync_fetch_and_add(&c->matched, 1); break;
	case C_LOST: __sync_fetch_and_add(&c->lost, 1); break;
	case C_TRUNCATED: __sync_fetch_and_add(&c->truncated, 1); break;
	case C_KILLED: __sync_fetch_and_add(&c->killed, 1); break;
	case C_KILL_FAILED: __sync_fetch_and_add(&c->kill_failed, 1); break;
	case C_READ_ERRORS: __sync_fetch_and_add(&c->read_errors, 1); break;
	case C_PENDING_DROPPED: __sync_fetch_and_add(&c->pending_dropped, 1); break;
	}
}

/* bump counts in the global slot and in the watch's slot. */
static __always_inline void bump(__u32 slot, enum counter_field f)
{
	bump_one(0, f);
	if (slot != 0)
		bump_one(slot, f);
}

static __always_inline void fill_task(struct event *e, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	e->tgid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->uid = (__u32)bpf_get_current_uid_gid();
	e->ktime_ns = bpf_ktime_get_boot_ns();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

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

	/* No wakeup: the consumer polls with a short deadline. A wakeup per
	 * event costs ~15x the event itself on a small VM. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
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
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
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

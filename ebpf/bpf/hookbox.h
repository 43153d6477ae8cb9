/* What exec.c (the tracepoint programs) and lsm.c (the BPF LSM programs)
 * share: the event layout, the maps and the counters. The two objects are
 * loaded separately (lsm.c only where the BPF LSM is active) and run on one
 * set of maps: the loader gives lsm.c's programs exec.c's maps.
 *
 * The layout of struct event is mirrored in ../event.go (decodeEvent); the
 * Go tests compare both against the generated execEvent type. */

#ifndef HOOKBOX_H
#define HOOKBOX_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define SIGKILL 9
#define EPERM 1
#define TASK_COMM_LEN 16
#define FILENAME_CAP 4096 /* PATH_MAX, NUL included */
#define MAX_WATCHES 1024  /* watch slots are 1..MAX_WATCHES; slot 0 is the global total */
#define PTRACE_MODE_ATTACH 0x02 /* include/linux/ptrace.h */

enum event_kind {
	EVENT_EXEC = 1,
	EVENT_FAILED = 2,
	EVENT_DENIED = 3,        /* lsm: bprm_check_security refused the exec (EPERM) */
	EVENT_PTRACE_DENIED = 4, /* lsm: a ptrace-class access was refused (EPERM) */
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
	FLAG_TRACEME = 1 << 8,           /* EVENT_PTRACE_DENIED: PTRACE_TRACEME, target is the would-be tracer */
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
	__u64 denied;          /* execs refused by bprm_check_security (enforce) */
	__u64 ptrace_denied;   /* ptrace-class accesses refused */
};

struct event {
	__u64 cookie;
	__u64 cgroup_id;
	__u64 ktime_ns;       /* bpf_ktime_get_boot_ns: CLOCK_BOOTTIME */
	__u64 ino;            /* EVENT_EXEC: mm->exe_file; EVENT_DENIED: bprm->file */
	__u32 dev;            /* ...->i_sb->s_dev, kernel-internal encoding */
	__u32 tgid;
	__u32 tid;
	__u32 ppid;           /* real_parent->tgid */
	__u32 uid;            /* real uid in the initial user namespace */
	__s32 err;            /* EVENT_FAILED, EVENT_*DENIED: errno (positive) */
	__u32 argv_len;       /* arg_end - arg_start: the full argv length */
	__u32 argv_size;      /* bytes of argv[] captured */
	__u32 filename_size;  /* bytes of filename[], NUL excluded */
	__u32 target;         /* EVENT_PTRACE_DENIED: the other process's tgid */
	__u32 mode;           /* EVENT_PTRACE_DENIED: PTRACE_MODE_* bits asked for */
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
	__u32 denied;   /* lsm.c refused it and reported it: the exit reports nothing */
	__u32 pad;
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
	C_DENIED,
	C_PTRACE_DENIED,
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
	case C_DENIED: __sync_fetch_and_add(&c->denied, 1); break;
	case C_PTRACE_DENIED: __sync_fetch_and_add(&c->ptrace_denied, 1); break;
	}
}

/* bump counts in the global slot and in the watch's slot. */
static __always_inline void bump(__u32 slot, enum counter_field f)
{
	bump_one(0, f);
	if (slot != 0)
		bump_one(slot, f);
}

/* submit hands a reserved event to the consumer without waking it: it
 * polls (Options.PollInterval), and a wakeup per event costs ~15x the
 * event itself on a small VM. Once the ring is a quarter full it is woken
 * at once, so that a burst is read well before it fills the ring, not at
 * the next poll: the poll interval bounds the latency of a trickle, never
 * the exec rate the ring absorbs. */
static __always_inline void submit(void *e)
{
	__u64 queued = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);

	bpf_ringbuf_submit(e, queued > size / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
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

#endif /* HOOKBOX_H */

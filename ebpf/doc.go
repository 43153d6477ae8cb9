// Package ebpf is hookbox's exec tracer: BPF programs that record every exec
// inside a run's cgroup, and the Go side that loads them, arms them per run
// and decodes what they record.
//
// ebpf records, render judges: this package owns the BPF objects, the
// in-kernel cgroup filter, enforcement and event decoding. It holds no
// verdict logic: it never decides whether a trace matches a render. It
// reports every event it could not deliver (Stats) so that the verifier can
// refuse to confirm an incomplete trace.
//
// # What is recorded
//
// One Tracer (Load) serves many concurrent runs. Watch arms the in-kernel
// filter for one cgroup2 id (the inode number of the run's cgroup2
// directory, what bpf_get_current_cgroup_id returns); from then on:
//
//   - every successful exec in that cgroup (tracepoint
//     sched/sched_process_exec) yields a KindExec event: tgid, tid, ppid
//     (real parent's tgid), real uid, cgroup id, CLOCK_BOOTTIME ns, comm, the
//     filename the kernel executed (bprm->filename), argv as the kernel
//     copied it onto the new stack (read before the new image runs, so
//     user space cannot have changed it), capped at Options.ArgvCap bytes
//     with the full length and a truncation flag, and the identity of the
//     executed file (mm->exe_file: device and inode; for a #! script that
//     is the interpreter);
//   - every failed execve/execveat in that cgroup (syscalls tracepoints,
//     negative return) yields a KindFailed event with the errno and the
//     filename argument (its pointer recorded at syscall entry, the
//     string read from the caller's unchanged memory at exit, only for
//     failures; for execveat it may be relative to the dirfd, which is
//     not recorded). Failed events carry no argv and no file identity;
//   - with the BPF LSM programs (below), every refusal yields a KindDenied
//     event (an exec refused in enforce mode: filename as the kernel
//     holds it, identity of the refused file, errno EPERM, no argv; the
//     failed exec it causes is not reported a second time) or a
//     KindPtraceDenied event (a ptrace-class access refused: the target's
//     tgid and the PTRACE_MODE_* bits asked for).
//
// Events of one watch arrive on Watch.Events in the order the kernel
// reserved them in the ring buffer (per process, that is exec order).
//
// # Loss accounting
//
// Nothing is dropped silently. For every event it attempts, the kernel
// counts "matched" in the watch's own counter slot before reserving ring
// space, and "lost" when the reservation fails. Stop waits until
// matched == delivered + lost, so Stats.Lost is exact per watch, not
// inferred from a global counter. Events the BPF programs never ran for
// (recursion misses, reported by the kernel per program) cannot be
// attributed to a cgroup: any miss while a watch was armed shows as
// Stats.Missed on that watch. Stats.Incomplete lists every reason a watch's
// record may lack something.
//
// # Enforcement
//
// Where the BPF LSM is active (host.BPFLSMActive) and the kernel lets them
// load, Load also attaches BPF LSM programs (bpf/lsm.c) on the same maps
// (Tracer.LSM says whether, or why not; Stats.Denies what a watch got):
//
//   - every watch: attach-strength ptrace-class access from the cgroup to
//     another process fails with EPERM (ptrace_access_check: ptrace
//     attach, /proc/<pid>/mem, process_vm_readv/writev, pidfd_getfd), and
//     so does PTRACE_TRACEME (ptrace_traceme). Read-strength checks
//     (/proc/<pid>/environ, maps, fd) are not refused, nor is access to
//     the caller's own thread group (the kernel grants it before any LSM);
//   - a watch with Policy.Enforce: bprm_check_security refuses every exec
//     of a file whose (device, inode) is not in Policy.Allowed, before the
//     point of no return: execve fails with EPERM and the caller goes on.
//     The hook runs for each file of an exec (a #! script, then its
//     interpreter), so both must be allowed. A memfd (memfd_create, then
//     execveat AT_EMPTY_PATH) has no allowed identity and is refused.
//
// Without them, a watch with Policy.Enforce kills, from sched_process_exec,
// every exec whose (device, inode) is not in Policy.Allowed:
// bpf_send_signal(SIGKILL) queues the signal before the new image has run
// a single user instruction (it is delivered on the way out of execve).
// The event is still recorded, with Killed set. That kill also stays
// behind the LSM programs, which leave it nothing to do. Enforcement does
// not depend on ring space: a lost event still kills, a refusal is still
// refused. An exec whose file identity cannot be read is killed. Failed
// execs are not enforced (nothing ran).
//
// # File identity
//
// FileID.Dev uses the user-space dev_t encoding (what stat(2) puts in
// st_dev: glibc makedev, equal to the kernel's new_encode_dev for every
// major < 4096); its String form is major:minor. The BPF side reads the
// kernel-internal s_dev of the executed inode's superblock
// (major<<20 | minor) and the decoder converts it.
//
// FileIdentity and FileIdentityIn compute the same identity for a path:
// the inode number, and the superblock's device found by mount id in
// mountinfo. That is deliberately not stat's st_dev, which differs on
// overlayfs with layers on several filesystems (stat reports the layer's
// device, exec the overlay's) and on btrfs subvolumes. Caveat: on such a
// mixed-filesystem overlay without xino, inode numbers of different layers
// can collide under the one overlay device, so (dev, ino) is ambiguous
// there; keep a run's executables on one filesystem (hookbox's runfiles
// tree and containerd's snapshots normally are).
//
// # Host requirements
//
// Linux with BTF (/sys/kernel/btf/vmlinux), ring buffers,
// bpf_ktime_get_boot_ns and statx mount ids (5.8+), openat2 (5.6+) for
// FileIdentityIn; 6.1+ is the floor hookbox tests against (it relies on
// run-time allocated hash maps in tracing programs, which 6.1 made safe);
// measured on 6.18. tracefs must be mounted (EnsureTracefs mounts it as
// root), and the process needs CAP_BPF+CAP_PERFMON or CAP_SYS_ADMIN.
// Anything missing is reported as an error wrapping ErrNotSupported.
// The BPF LSM programs additionally need CONFIG_BPF_LSM with "bpf" in the
// active LSMs (lsm= on the kernel command line), securityfs mounted to
// tell (EnsureSecurityfs) and a kernel that loads trampoline programs:
// some refuse them with EPERM even to root (measured: a 6.18 guest kernel
// with bpf active that refuses every fentry and LSM program). Without
// them Load succeeds and Tracer.LSM says why.
//
// # Costs
//
// Load and attach take ~30 ms; Close ~200 ms (each tracepoint detach waits
// for RCU grace periods in the kernel), so keep one Tracer for many runs or
// close it off the critical path. Per matched exec the BPF side costs a few
// µs (no ring wakeups); a filter miss well under a µs. See the benchmarks.
package ebpf

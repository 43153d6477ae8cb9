// Package tracehelper owns the protocol between a rootless hookbox and its
// privileged exec tracer helper (`hookbox tracer serve`), the helper's
// server and the client. A rootless hookbox cannot load BPF; the helper,
// running as root, watches the run's cgroup with the ebpf tracer on its
// behalf and streams that cgroup's exec events back.
//
// It must not judge or interpret: no verdicts (the events and ebpf.Stats
// go back as recorded; render/verify judges them) and no container logic
// (it never creates, moves or kills processes or cgroups). Enforcement
// happens in the kernel, exactly as ebpf.Policy says.
//
// # Protocol
//
// One watch per SOCK_STREAM unix connection; every message is one line of
// JSON. Events and stats use the ebpf package's JSON forms.
//
//	client: {"v":2,"op":"watch","key":"…","policy":{"Enforce":true,"Allowed":[{"Dev":2049,"Ino":131}]}}
//	        + SCM_RIGHTS: one open fd of the cgroup2 directory
//	server: {"v":2,"type":"ok","cgroup_id":4242,"key":"…"}
//	     or {"v":2,"type":"error","code":"not-owner","message":"…"}, then close
//	server: {"type":"event","event":{…ebpf.Event…}}  (any number)
//	client: {"op":"stop"}                             (once the run's processes are gone)
//	server: {"type":"stats","stats":{…ebpf.Stats…},"error":"…"}, then close
//
// The cgroup travels as a directory fd, not a path: the client and the
// helper may see different mount and cgroup namespaces, and an fd cannot
// name a cgroup its sender could not open. The helper fstatfs'es it (it
// must be on cgroup2) and fstats it: the cgroup id is its inode number,
// and its owner must be the peer's uid (SO_PEERCRED, taken when the
// client connected). Root gets no exception: a uid watches only cgroups
// it owns, so it learns nothing about processes it could not already
// place there and enforcement kills only in its own cgroups.
//
// key is sent to and by a managed tracer only (see managed.go): it must
// be the tracer's ManagedKey, or the watch is refused (bad-key), and the
// client refuses an ok reply that does not name the key it asked for.
//
// The policy's JSON is ebpf.Policy's default encoding; Version changes when
// it or any message does. A request line is at most MaxRequestSize bytes
// (MaxAllowed files) and must arrive within 10 s of connecting.
//
// Refusals carry a stable Code (see the Code constants) and a message that
// says what to fix; the client returns them as *RefusedError.
//
// # Completeness
//
// On stop the helper calls ebpf's Watch.Stop, which drains until every
// event the kernel counted is delivered or counted lost, forwards the last
// events and sends the final stats. Anything else ends the stream without
// vouching for it: a client that disconnects without stop has its watch
// stopped and discarded; a helper that shuts down sends the stats with an
// error; a connection that breaks makes the client's Watch.Stop return an
// error wrapping ErrBroken. The client must then count the trace as
// incomplete.
package tracehelper

package launcher

import (
	"time"

	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/notify"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
	"hookbox.dev/hookbox/runfiles"
)

// Status is a run result's terminal status. Statuses are snake_case and
// form a closed set; reason ids are kebab-case and open (docs/cli.md).
type Status string

// Statuses of a run's result.
const (
	StatusCompleted      Status = "completed"
	StatusCompletedEmpty Status = "completed_empty" // exited 0 but produced none of its declared artifacts
	StatusFailed         Status = "failed"          // the engine exited non-zero
	StatusTimedOut       Status = "timed_out"
	StatusCancelled      Status = "cancelled"
	StatusOOMKilled      Status = "oom_killed"
	StatusInfraError     Status = "infra_error" // hookbox could not run or finish the run

	// Only in run listings (hookbox ps), never in result.json: the run has
	// no result yet, and its hookbox is alive (running) or gone (abandoned).
	StatusRunning   Status = "running"
	StatusAbandoned Status = "abandoned"
)

// Reason ids in results (stable strings).
const (
	ReasonTimeout          = "timeout"
	ReasonFirstOutput      = "first-output-timeout"
	ReasonIdle             = "idle-timeout"
	ReasonSignal           = "cancelled-by-signal"
	ReasonNoArtifacts      = "no-declared-artifact"
	ReasonMissingArtifacts = "declared-artifact-missing"
	ReasonOOM              = "oom-kill"
	ReasonHarvestPartial   = "harvest-partial"
	// ReasonOutputTruncated (with :stdout or :stderr): the stream reached
	// limits.output; result.json output says how much was dropped.
	ReasonOutputTruncated    = "output-truncated"
	ReasonTeardownIncomplete = "teardown-incomplete"
	// ReasonContainerdUnreachable: containerd stopped answering during the
	// run or its teardown (it died, or did not reply within a step's
	// deadline). Teardown went on through the kernel; what only containerd
	// can remove is listed in Result.Leftovers for hookbox gc.
	ReasonContainerdUnreachable = "containerd-unreachable"
	ReasonTracerNotRun          = "tracer-not-run"
	// ReasonNoRunCgroup (degraded): a rootless run without a delegated
	// cgroup2 subtree has no cgroup of its own.
	ReasonNoRunCgroup = "run-cgroup-unavailable"
	// ReasonPtraceDenialUnavailable (degraded): the run was traced without
	// the tracer's BPF LSM programs (no BPF LSM here, or the kernel would
	// not load them), so /proc/<pid>/mem between the run's processes was
	// not denied; seccomp still denied ptrace and process_vm_*.
	ReasonPtraceDenialUnavailable = "ptrace-denial-unavailable"
	// ReasonRecordUnsealed: the record's digests could not be computed, so
	// the run has neither them nor an attestation.
	ReasonRecordUnsealed = "record-unsealed"
)

// Result is result.json.
type Result struct {
	SchemaVersion int    `json:"schema_version"`
	RunID         string `json:"run_id"`
	Spawn         string `json:"spawn"`
	// RenderDigest is the sha256 of render.json's canonical bytes, the
	// render with its runfiles manifest: the content digest. It is empty
	// when the run ended before its runfiles were assembled.
	RenderDigest string `json:"render_digest"`
	// PlanDigest is the render's plan digest and ContentDigest its content
	// digest, equal to RenderDigest (docs/architecture.md "Digests"):
	// hookbox run --expect-digest accepts either. Absent in records from
	// before they existed; ContentDigest also when RenderDigest is empty.
	PlanDigest    string `json:"plan_digest,omitempty"`
	ContentDigest string `json:"content_digest,omitempty"`
	Status        Status `json:"status"`
	// ExitCode is the engine's exit code; absent when it never exited on
	// its own (killed, never started).
	ExitCode *int     `json:"exit_code,omitempty"`
	Signal   string   `json:"signal,omitempty"`
	Reasons  []string `json:"reasons,omitempty"`
	// Degraded lists, as reason ids, protections the backend could not
	// give this run (rootless: limit-unavailable:memory, run-cgroup-
	// unavailable…); hookbox doctor says why and how to fix each.
	Degraded []string `json:"degraded,omitempty"`
	// Leftovers are the run's resources teardown could not remove, or
	// could not confirm gone because containerd did not answer (task,
	// container, snapshot, cgroup, tmpfs), with reason teardown-incomplete:
	// hookbox gc removes them later and marks the record collected.
	Leftovers []string  `json:"leftovers,omitempty"`
	Error     string    `json:"error,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	// Timings are the phase durations in milliseconds.
	Timings   Timings                `json:"timings_ms"`
	Artifacts []mounts.ArtifactMatch `json:"artifacts"`
	Harvest   *mounts.Report         `json:"harvest,omitempty"`
	// Output is what the record kept of the engine's stdout and stderr;
	// absent when the task was never created, and in records from before
	// limits.output.
	Output *OutputResult `json:"output,omitempty"`
	Trace  TraceResult   `json:"trace"`
	// Slots are the launch slot values ({"run_id": ..., "run_dir": ...})
	// the launcher filled into the hooks' configuration; the verdict
	// requires exactly them where the render has a slot. Absent when the
	// run ended before its files were written, and in records from before
	// hookbox filled slots (judged slot-values-unknown).
	Slots render.SlotValues `json:"slots,omitempty"`
	// Network is the egress evidence (network.jsonl summed up); its own
	// record beside the exec verdict, which it never changes.
	Network   *NetworkResult `json:"network,omitempty"`
	RecordDir string         `json:"record_dir"`
	// Notify is the host-side notifier's outcome (package notify); it never
	// changes Status or ExitCode.
	Notify *NotifyResult `json:"notify,omitempty"`
	// Workspace is what an overlay workspace's engine changed.
	Workspace *WorkspaceResult `json:"workspace,omitempty"`
	// Record is the digest of every file of the record written before
	// result.json (hookbox verify checks them); absent in records from
	// before it existed, or when the digests could not be computed.
	Record *RecordDigests `json:"record,omitempty"`
	// Attestation is the run's in-toto statement (attestation.dsse.json),
	// signed or not (docs/attestation.md).
	Attestation *AttestationResult `json:"attestation,omitempty"`
	// Runfiles is how the runfiles store objects the run mounts were
	// checked, once they were assembled.
	Runfiles *RunfilesResult `json:"runfiles,omitempty"`
}

// The checks of the runfiles store before a run (RunfilesResult.Verify).
const (
	RunfilesVerifyQuick = "quick" // stat and seal of each object; re-hash where the seal differs
	RunfilesVerifyFull  = "full"  // every object re-hashed (--verify-runfiles)
)

// RunfilesResult is the runfiles section of result.json.
type RunfilesResult struct {
	Verify string `json:"verify"` // RunfilesVerifyQuick or RunfilesVerifyFull
	Files  int    `json:"files"`  // file entries of the manifest
	// Rehashed counts store objects read to check them: all with full,
	// those whose seal differed with quick.
	Rehashed int `json:"rehashed"`
	// Repaired lists the store objects found damaged and replaced from
	// their host files before the run (tampering, or a failing disk).
	Repaired []runfiles.Repair `json:"repaired,omitempty"`
}

// OutputResult is the output section of result.json: the engine's stdout
// (StdoutFile) and stderr (StderrFile) as recorded, each capped at
// CapBytes (limits.output; 0: no cap).
type OutputResult struct {
	CapBytes int64        `json:"cap_bytes"`
	Stdout   StreamResult `json:"stdout"`
	Stderr   StreamResult `json:"stderr"`
}

// StreamResult is one output stream's account.
type StreamResult struct {
	// Bytes are in the record file.
	Bytes int64 `json:"bytes"`
	// DroppedBytes were read from the engine and not kept: everything after
	// the cap, and the start of the line the cap cut.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	// Error: writing or trimming the record file failed (the output after
	// a failed write is dropped and counted).
	Error string `json:"error,omitempty"`
}

// NotifyResult is the notify section of result.json.
type NotifyResult = notify.Outcome

// Timings of a run's phases, in milliseconds.
// Startup, the other phases and Finish add up to Total.
type Timings struct {
	// Startup: from the hookbox process's start (Options.ProcessStart) to
	// the run's: compiling the spec, connecting, secrets, gc of leftovers.
	Startup  int64 `json:"startup,omitempty"`
	Prepare  int64 `json:"prepare"`          // image, runfiles, tmpfs, mounts
	Create   int64 `json:"create"`           // container and task
	Run      int64 `json:"run"`              // start to exit
	Teardown int64 `json:"teardown"`         // kill, delete, harvest, unmount
	Verify   int64 `json:"verify,omitempty"` // judging the trace, after teardown (absent in older records)
	// Finish: unloading a tracer this process loaded (Options.ReleaseTracer)
	// and sealing the record; the printed summary adds the attestation,
	// the notifier and the rest, up to the process's exit.
	Finish int64 `json:"finish,omitempty"`
	// Total: from ProcessStart (else the run's start) to the result.
	Total int64 `json:"total"`
}

// Sum is the phases' sum: Total, once the run is over.
func (t Timings) Sum() int64 {
	return t.Startup + t.Prepare + t.Create + t.Run + t.Teardown + t.Verify + t.Finish
}

// TraceResult is the verdict section (render/verify): confirmed only on
// complete evidence; otherwise unchecked with reasons, or mismatch with
// diffs (docs/contracts.md §5).
type TraceResult struct {
	Mode    render.TraceMode `json:"mode,omitempty"` // the render's trace mode
	Status  verify.Status    `json:"status"`
	Reasons []string         `json:"reasons,omitempty"`
	Diffs   []verify.Diff    `json:"diffs,omitempty"`
	Matched []verify.Match   `json:"matched,omitempty"` // which exec satisfied which render rule
	Events  int              `json:"events,omitempty"`
	// Detail explains an unavailable tracer and how to make one available.
	Detail string `json:"detail,omitempty"`
}

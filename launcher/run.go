// Package launcher runs a render as a containerd task and records the run.
//
// It owns the run lifecycle (docs/contracts.md §1, §2, §5): the run id and
// intent are written before anything is created; the spawn record is
// written once the sandbox exists and before any output is read; teardown
// ends every process in the run's cgroup, survives a second cancellation,
// and is retry-safe; the result is written last. It never judges what ran (the render package
// does) and never prints a secret: values reach only the container's
// environment.
package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sync/errgroup"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/faultpoint"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/initseccomp"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/notify"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
	"hookbox.dev/hookbox/runfiles"
)

// DefaultGrace is how long teardown waits after SIGTERM before SIGKILL.
const DefaultGrace = 10 * time.Second

// Labels every hookbox container carries.
const (
	LabelRunID        = "dev.hookbox.run-id"
	LabelRenderDigest = "dev.hookbox.render-digest"
	LabelVersion      = "dev.hookbox.version"
	// The hookbox process that owns a resource, by pid and start time, so
	// gc can tell an abandoned one from a live one without its run record.
	LabelOwnerPID   = "dev.hookbox.owner-pid"
	LabelOwnerStart = "dev.hookbox.owner-start"
)

// Options configure a run.
type Options struct {
	// Backend is where the run executes (Connect).
	Backend *Backend
	// StateDir holds the run records; CacheDir the runfiles store ("" =
	// StateDir).
	StateDir string
	CacheDir string
	// Grace between SIGTERM and SIGKILL at teardown (DefaultGrace if 0).
	Grace time.Duration
	// Sink receives events; Stdout, if set, receives the engine's stdout
	// as it streams (human mode).
	Sink    Sink
	Stdout  io.Writer
	Version string
	// RunID, if set, is used instead of a fresh one (tests).
	RunID string
	// RequireTrace turns an unavailable tracer into an error before Start
	// instead of an unchecked verdict.
	RequireTrace bool
	// VerifyRunfiles re-hashes every runfiles store object the run mounts
	// (runfiles.VerifyFull) instead of the quick check against each
	// object's seal: it also finds an object whose seal was forged.
	VerifyRunfiles bool
	// Notify is the resolved notifier plan (notify.Resolve); the zero Plan
	// is disabled. It runs after result.json is written, and result.json is
	// then rewritten with its outcome; it never changes status or exit code.
	Notify notify.Plan
	// SecretLookup is the global config's secret lookup command, used for
	// secrets the host environment does not hold.
	SecretLookup secretsconf.Lookup
	// NotifyOptions configure the notifier's execution (RecordDir is set by
	// Run).
	NotifyOptions notify.Options
	// Signer signs the run's attestation (the host key); nil writes it
	// unsigned, and Unsigned says why in result.json.
	Signer   *attest.Signer
	Unsigned string
	// Runfiles, when set, are r's runfiles already assembled into the
	// store (plan.CheckDigest did, to compare the content digest); the run
	// mounts them instead of assembling again.
	Runfiles *runfiles.Result
	// ProcessStart is when the hookbox process started: Timings count from
	// it (zero: from the run's start).
	ProcessStart time.Time
	// ReleaseTracer: this process runs no other run, so a BPF tracer it
	// loaded is closed before the result (Timings.Finish counts the
	// detach, which the process's exit would otherwise pay unseen).
	ReleaseTracer bool
}

// Run runs r to its end and returns its result. Errors before the run id
// exists are returned as err; everything after is in the result (status
// infra_error with the error text), which is also written to result.json.
func Run(ctx context.Context, r *render.Render, opts Options) (*Result, error) {
	if opts.Backend == nil || opts.Backend.Client == nil {
		return nil, errors.New("launcher: no backend connected to containerd")
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.Sink == nil {
		opts.Sink = SinkFunc(func(Event) {})
	}
	planDigest, _, err := r.PlanDigest()
	if err != nil {
		return nil, err
	}
	// The run id names the lookups' cgroups; nothing else exists yet.
	id := opts.RunID
	if id == "" {
		id = NewRunID(time.Now())
	}
	// Values are resolved before anything exists: a missing secret leaves
	// nothing behind (its lookup's cgroup is gone with it), and they go to
	// the container's environment only.
	env, secretStream, credentials, lookupDegraded, err := resolveEnv(ctx, r, opts.SecretLookup, opts.Backend.Cgroups.Helpers(), id)
	if err != nil {
		return nil, err
	}
	// A cheap collection of what this state dir's abandoned runs left,
	// before adding a run; a daemon that stopped answering since it was
	// resolved cannot hold it.
	gcCtx, cancelGC := context.WithTimeout(ctx, daemonDeadlines.gc)
	collected, _ := collect(gcCtx, opts.Backend, opts.StateDir, false, false)
	cancelGC()
	started := time.Now()
	dir := filepath.Join(RunsDir(opts.StateDir), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("launcher: run record: %w", err)
	}
	x := &execution{
		opts: opts, env: env, secretStream: secretStream, credentials: credentials, r: r, id: id, dir: dir, started: started,
		// prepare adds the base image's lease (baseLease), which every
		// request that makes something containerd collects names.
		ctx: namespaces.WithNamespace(ctx, oci.Namespace),
		result: &Result{SchemaVersion: ResultSchemaVersion, RunID: id, Spawn: r.Spawn, PlanDigest: planDigest, StartedAt: started.UTC(), RecordDir: dir,
			Trace: TraceResult{Status: verify.StatusUnchecked, Reasons: []string{ReasonTracerNotRun}}},
	}
	if collected != nil && len(collected.Actions) > 0 {
		x.progress("gc", "collected %d leftovers of abandoned runs", len(collected.Actions))
	}
	for _, d := range lookupDegraded {
		x.result.Degraded = append(x.result.Degraded, d.reason)
		x.progress("secrets", "a secret lookup ran without a cgroup of its own (%s): %s", d.reason, d.why)
	}
	x.run()
	return x.result, nil
}

// execution is one run in progress.
type execution struct {
	opts Options
	env  map[string]string // launch-time values of host variables
	// secretStream is the container's secrets for hookbox-init, written to
	// the task's stdin, never into the spec (resolveEnv).
	secretStream []byte
	// credentials are the gateways' secret values, by secret name: host
	// side only (startEgress).
	credentials map[string]string
	r           *render.Render
	id, dir     string
	ctx         context.Context
	started     time.Time
	result      *Result
	// records are the record files being written beside the run
	// (writeRecord).
	records errgroup.Group

	treeDir   string
	rootfs    []mount.Mount
	runDir    string // host tmpfs
	container containerd.Container
	task      containerd.Task
	exitCh    <-chan containerd.ExitStatus
	// stopWaiting ends containerd's wait on the task once teardown is done.
	stopWaiting context.CancelFunc
	// init is the task's init pinned by its pidfd (nil on a kernel without
	// pidfds): teardown signals it and watches its exit through the kernel.
	init *cgroup.Process
	// daemonErr is the first error that showed containerd unreachable
	// during the run or its teardown (ReasonContainerdUnreachable).
	daemonErr error
	cg        *cgroup.Run
	stdoutW   *io.PipeWriter
	readerWG  sync.WaitGroup
	// stdout and stderr are the engine's output as recorded (output.go).
	stdout, stderr *cappedOutput
	activity       chan struct{}

	// engineStarted: the task was started; before that, an exit status is
	// runc init's, never the engine's.
	engineStarted bool
	// initPID and initExe: the task's init and its executable before Start.
	initPID int
	initExe string
	// deadline is when the run's timeout ends the engine: set as Start is
	// sent, so a Start whose reply hangs does not defer it.
	deadline  time.Time
	killedFor string // status decided by hookbox (timeout, cancel), "" when the engine ended on its own
	// stopped: teardown saw every process of the run end (through the
	// kernel); shimExited: containerd reported the task's exit;
	// taskDeleted: containerd deleted the task.
	stopped, shimExited, taskDeleted bool
	trace                            *tracing
	egress                           *egressRun
	// ownerStart is this hookbox's start time, labelled on what it creates.
	ownerStart string
	// cgroupsPath is the run's cgroup: oci.CgroupsPath, or a delegated one;
	// noCgroup says why a rootless run has none.
	cgroupsPath string
	noCgroup    string

	// workspaceStore is the host tmpfs of an overlay workspace's upper layer.
	workspaceStore string

	// grouped: the run's task is in the shim group; anchor: the group's
	// anchor being made by this run (shimgroup.go).
	grouped bool
	anchor  *pending[struct{}]
}

// ownerLabels mark a run's containerd resources with their run and owner.
func (x *execution) ownerLabels() map[string]string {
	return map[string]string{LabelRunID: x.id, LabelOwnerPID: strconv.Itoa(os.Getpid()), LabelOwnerStart: x.ownerStart}
}

func (x *execution) emit(e Event) {
	e.Time = time.Now().UTC()
	e.RunID = x.id
	x.opts.Sink.Emit(e)
}

func (x *execution) progress(phase, format string, args ...any) {
	x.emit(Event{Type: EventProgress, Phase: phase, Detail: fmt.Sprintf(format, args...)})
}

func (x *execution) run() {
	res := x.result
	err := x.prepare()
	prepared := time.Now()
	res.Timings.Prepare = prepared.Sub(x.started).Milliseconds()
	if err == nil {
		err = x.create()
	}
	created := time.Now()
	res.Timings.Create = created.Sub(prepared).Milliseconds()
	if err == nil {
		x.wait()
	}
	ran := time.Now()
	if x.task != nil {
		res.Timings.Run = ran.Sub(created).Milliseconds()
	}
	switch {
	case err != nil && x.ctx.Err() != nil:
		// Cancelled while preparing or creating: a cancellation, not an
		// infrastructure failure.
		x.killedFor, res.Error = ReasonSignal, err.Error()
		if x.task == nil {
			res.Status, res.Reasons = StatusCancelled, append(res.Reasons, ReasonSignal)
		}
	case err != nil:
		res.Status, res.Error = StatusInfraError, err.Error()
	}
	x.teardown()
	x.anchorMade()
	// Before the seal digests the record: a record file still being
	// written when prepare failed is on disk, or its failure is the run's.
	if werr := x.recordsWritten(); werr != nil && res.Error == "" {
		res.Status, res.Error = StatusInfraError, werr.Error()
	}
	tornDown := time.Now()
	res.Timings.Teardown = tornDown.Sub(ran).Milliseconds()
	// Judged once every resource is gone: however long a big trace takes,
	// it cannot make the cleanup miss its deadline (docs/contracts.md 2.3).
	x.judgeTrace()
	judged := time.Now()
	res.Timings.Verify = judged.Sub(tornDown).Milliseconds()
	if x.opts.ReleaseTracer {
		releaseTracer()
	}
	// Known before the seal, so the attested result says it too.
	helpers := x.opts.Backend.Cgroups.Helpers()
	if d := notifyDegraded(x.opts.Notify, helpers, res); d != "" {
		res.Degraded = append(res.Degraded, d)
		x.progress("notify", "the notifier will run without a cgroup of its own: %s", helpers.Unavailable)
	}
	x.seal()
	res.EndedAt = time.Now().UTC()
	res.Timings.Startup, res.Timings.Total = 0, res.EndedAt.Sub(x.started).Milliseconds()
	if start := x.opts.ProcessStart; !start.IsZero() && start.Before(x.started) {
		res.Timings.Startup, res.Timings.Total = x.started.Sub(start).Milliseconds(), res.EndedAt.Sub(start).Milliseconds()
	}
	res.Timings.Finish = 0
	res.Timings.Finish = res.Timings.Total - res.Timings.Sum() // absorbs the rounding of the others
	// A notifier that will not start has its outcome already: result.json
	// is then written once, not again after notify.
	res.Notify = x.opts.Notify.Skipped(string(res.Status), res.Spawn)
	// The attestation with it, before the notifier, so that it can pass
	// the attestation on.
	switch werr := x.writeResult(); {
	case werr != nil && res.Error == "":
		res.Status, res.Error = StatusInfraError, "write result: "+werr.Error()
	case werr == nil:
		// What finishedCleanly will read back from the record.
		if tornDownCleanly(res.Reasons) {
			unmarkActive(x.opts.StateDir, x.id, false)
		}
	}
	x.emit(Event{Type: EventResult, Result: res})
	x.notify()
}

// notify runs the notifier on the terminal result, then records its
// outcome in result.json. A run cancelled by a signal is still notified
// (bounded by the notifier's deadline); a signal while the notifier runs
// ends it.
func (x *execution) notify() {
	res := x.result
	if res.Notify != nil { // skipped, and recorded with the result
		x.emit(Event{Type: EventNotify, Notify: res.Notify})
		return
	}
	ctx := x.ctx
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	env := notify.Envelope{
		SchemaVersion: notify.EnvelopeSchemaVersion, RunID: res.RunID, Spawn: res.Spawn,
		RenderDigest: res.RenderDigest, Status: string(res.Status), ExitCode: res.ExitCode,
		VerdictStatus: string(res.Trace.Status), ResultPath: filepath.Join(x.dir, ResultFile),
	}
	opts := x.opts.NotifyOptions
	opts.RecordDir = x.dir
	opts.Cgroups = x.opts.Backend.Cgroups.Helpers()
	outcome := notify.Run(ctx, x.opts.Notify, env, opts)
	res.Notify = outcome
	if err := writeJSON(filepath.Join(x.dir, ResultFile), res, 0o644); err != nil {
		x.progress("notify", "could not record the notify outcome in result.json")
	}
	x.emit(Event{Type: EventNotify, Notify: outcome})
}

// notifyDegraded is the degraded reason of a run whose notifier will run
// and the backend gives it no cgroup, else "". (A notifier whose cgroup
// fails only when it starts says so in its outcome: the result is sealed
// by then.)
func notifyDegraded(plan notify.Plan, helpers cgroup.Helpers, res *Result) string {
	if helpers.Parent != "" || !plan.Starts(string(res.Status), res.Spawn) {
		return ""
	}
	return notify.DegradedUncontained
}

// prepare writes the intent, then assembles everything the container needs.
// What does not depend on one another runs side by side: the base image is
// built while the intent is synced, the run dir's tmpfs is mounted and
// seeded while the runfiles are checked, and the render and OCI spec
// records are synced while containerd creates the container (create joins
// them before the spawn record).
func (x *execution) prepare() (err error) {
	self, err := host.StartTime(os.Getpid())
	if err != nil {
		return fmt.Errorf("read own start time: %w", err)
	}
	x.cgroupsPath = x.opts.Backend.Cgroups.Path(x.id)
	intent := Intent{
		SchemaVersion: 1, RunID: x.id, Spawn: x.r.Spawn, ContainerID: x.id,
		CgroupsPath: x.cgroupsPath, HookboxPID: os.Getpid(), HookboxStart: self,
		Address: x.opts.Backend.Address, CreatedAt: x.started.UTC(),
	}
	x.ownerStart = strconv.FormatUint(self, 10)
	built := start(baseImage)
	if err := writeJSON(filepath.Join(x.dir, IntentFile), intent, 0o644); err != nil {
		return fmt.Errorf("write intent: %w", err)
	}
	if err := markActive(x.opts.StateDir, x.id); err != nil {
		return err
	}
	x.startTracer()
	x.progress("image", "base image")
	base, err := built.wait()
	if err != nil {
		return err
	}
	x.ctx = leases.WithLease(x.ctx, BaseViewKey(base))
	// containerd answers for the view while the runfiles, the tmpfs and
	// the spec are prepared; prepare waits for it on every return, so
	// nothing it creates outlives a failed prepare unseen. The same holds
	// for the run dir's tmpfs (teardown unmounts what it mounted).
	view := x.viewBase(base)
	defer func() { err = view.failure(err) }()
	host := mounts.RunHostPaths(x.dir)
	x.runDir = host.RunDir
	slots := render.LaunchValues(x.id)
	runDir := x.prepareRunDir(host, slots)
	defer func() { err = runDir.failure(err) }()

	check := RunfilesVerifyQuick
	if x.opts.VerifyRunfiles {
		check = RunfilesVerifyFull
	}
	x.progress("runfiles", "%d programs, %s check of the store", len(x.r.Programs), check)
	assembled, err := x.runfiles()
	if err != nil {
		return err
	}
	st := assembled.Stats
	x.result.Runfiles = &RunfilesResult{Verify: check, Files: st.Files, Rehashed: st.ObjectsRehashed, Repaired: assembled.Repairs}
	for _, rep := range assembled.Repairs {
		x.progress("runfiles", "replaced damaged store object %s (from %s): %s", rep.Object, rep.Path, rep.Reason)
	}
	x.progress("runfiles", "%d files, %s copied, %s reused, %d store objects re-hashed", st.Files,
		humanBytes(st.BytesCopied), humanBytes(st.BytesReused), st.ObjectsRehashed)
	x.treeDir = assembled.TreeDir
	digest, canonical, err := x.r.Digest()
	if err != nil {
		return err
	}
	x.result.RenderDigest, x.result.ContentDigest = digest, digest
	x.writeRecord(RenderFile, append(canonical, '\n'))

	x.progress("tmpfs", "run dir %s", humanBytes(x.r.Limits.TmpfsBytes))
	if _, err := runDir.wait(); err != nil {
		return err
	}
	x.result.Slots = slots
	planned, err := plan.NewContainer(x.ctx, x.r, plan.Launch{
		RunID: x.id, Host: host, Prepared: true, HostValues: x.env, InheritCgroup: !x.opts.Backend.Cgroups.RuntimeCreates(),
	})
	if err != nil {
		return err
	}
	spec := planned.Spec
	x.joinShimGroup(spec)
	if planned.SeccompFilter != nil {
		// Read-only in the container, like the rest of the config dir.
		if err := os.WriteFile(filepath.Join(host.ConfigDir, initseccomp.FileName), planned.SeccompFilter, 0o444); err != nil {
			return fmt.Errorf("write the seccomp filter: %w", err)
		}
	}
	redacted, err := recordJSON(oci.Redact(spec, x.r))
	if err != nil {
		return err
	}
	x.writeRecord(OCIFile, redacted)
	return x.createContainer(view, base, spec, digest)
}

// prepareRunDir mounts the run dir's tmpfs (and an overlay workspace's
// store) and seeds it, in the background. It emits nothing, so the run's
// events stay in order.
func (x *execution) prepareRunDir(paths mounts.HostPaths, slots render.SlotValues) *pending[struct{}] {
	return start(func() (struct{}, error) {
		return struct{}{}, x.seedRunDir(paths, slots)
	})
}

// seedRunDir mounts and fills the run dir. The engine reads its hooks from
// its files, which get the run's launch slot values (the record keeps them
// for the verdict; the render and its digest keep the placeholders).
func (x *execution) seedRunDir(paths mounts.HostPaths, slots render.SlotValues) error {
	uid, gid := x.r.Process.UID, x.r.Process.GID
	if err := mounts.Create(paths.RunDir, mounts.RunDirSize(x.r), uid, gid); err != nil {
		return err
	}
	files, err := render.FillFiles(x.r.Files, slots)
	if err != nil {
		return err
	}
	if err := mounts.Seed(paths.RunDir, files, uid, gid); err != nil {
		return err
	}
	if err := x.prepareWorkspaceStore(paths.WorkspaceStore); err != nil {
		return err
	}
	return writeConfigFiles(paths.ConfigDir, files, uid, gid)
}

// writeRecord writes and syncs one file of the run record in the
// background; recordsWritten waits for every such write.
func (x *execution) writeRecord(name string, data []byte) {
	x.records.Go(func() error {
		return host.WriteFileAtomic(filepath.Join(x.dir, name), data, 0o644)
	})
}

// recordsWritten waits until every record file writeRecord was given is
// synced, and returns the first failure. It is called before the spawn
// record (nothing may run with its record incomplete) and before the
// result.
func (x *execution) recordsWritten() error {
	if err := x.records.Wait(); err != nil {
		return fmt.Errorf("write run record: %w", err)
	}
	return nil
}

// createContainer waits for the base image view and makes the run's
// container.
func (x *execution) createContainer(view *pending[[]mount.Mount], base *images.Image, spec *specs.Spec, digest string) error {
	rootfs, err := x.rootfsMounts(view, base)
	if err != nil {
		return err
	}
	x.progress("container", "create")
	labels := x.ownerLabels()
	labels[LabelRenderDigest], labels[LabelVersion] = digest, x.opts.Version
	faultpoint.Reach(faultpoint.BeforeCreate)
	err = x.daemonCall(x.ctx, daemonDeadlines.create, func(ctx context.Context) (err error) {
		x.container, err = x.opts.Backend.Client.NewContainer(ctx, x.id,
			containerd.WithSpec(spec),
			containerd.WithRuntime(x.opts.Backend.Runtime(), runtimeOptions(x.opts.Backend.RuncRoot)),
			containerd.WithContainerLabels(labels),
			func(context.Context, *containerd.Client, *containers.Container) error {
				faultpoint.Reach(faultpoint.CreateContainer)
				return nil
			})
		return err
	})
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	faultpoint.Reach(faultpoint.ContainerCreated)
	x.rootfs = rootfs
	return nil
}

// BaseViewKey names the base image's shared view and the lease that holds
// it (and the image's content when a run imports it): hookbox-base- and
// the chain id of the image's one layer.
func BaseViewKey(base *images.Image) string {
	return baseViewPrefix + identity.ChainID([]digest.Digest{base.LayerDigest}).Encoded()
}

// baseViewPrefix begins every base view's key.
const baseViewPrefix = "hookbox-base-"

// holdBaseLease makes the base image's lease (BaseViewKey), without an
// expiry: it holds the one read-only view of the image every run mounts,
// for as long as that image is hookbox's base (hookbox gc removes the
// leases and views of other base images once no run is live). x.ctx
// names it on every request, so the client never takes an unlabelled
// lease of its own while it creates the container either.
func (x *execution) holdBaseLease(ctx context.Context, key string) error {
	if _, err := x.opts.Backend.Client.LeasesService().Create(ctx, leases.WithID(key),
		leases.WithLabels(map[string]string{images.BaseLabel: key})); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("lease for the base image's view: %w", err)
	}
	return nil
}

// runfiles assembles the render's runfiles, unless the caller did.
func (x *execution) runfiles() (*runfiles.Result, error) {
	if x.opts.Runfiles != nil {
		return x.opts.Runfiles, nil
	}
	cacheDir := x.opts.CacheDir
	if cacheDir == "" {
		cacheDir = x.opts.StateDir
	}
	store, err := runfiles.OpenStore(cacheDir)
	if err != nil {
		return nil, err
	}
	return plan.Runfiles(x.ctx, store, x.r, RunfilesOptions(x.opts.VerifyRunfiles))
}

// RunfilesOptions are the runfiles stage's options for a run: the quick
// check of the store, or with verify (--verify-runfiles) every object
// re-hashed.
func RunfilesOptions(verify bool) runfiles.RenderOptions {
	if verify {
		return runfiles.RenderOptions{Verify: runfiles.VerifyFull}
	}
	return runfiles.RenderOptions{Verify: runfiles.VerifyQuick}
}

// retry runs a cleanup step up to five times, 100 ms apart: a resource can
// be briefly busy while the runtime releases it (a shim still exiting, a
// mount still referenced). Every step treats "already gone" as success, so
// repeating one is safe.
func retry(step func() error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = step(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func runtimeOptions(runcRoot string) any {
	if runcRoot == "" {
		return nil
	}
	return &runcoptions.Options{Root: runcRoot}
}

// baseImage builds this host's base image (in memory, no daemon call).
func baseImage() (*images.Image, error) {
	def, err := images.HostDefinition()
	if err != nil {
		return nil, err
	}
	return images.Build(def)
}

// ensureImage imports the base image unless containerd has it unpacked.
func (x *execution) ensureImage(ctx context.Context, built *images.Image) error {
	img, err := x.opts.Backend.Client.GetImage(ctx, built.Name)
	if err == nil {
		if ok, _ := img.IsUnpacked(ctx, images.Snapshotter); ok {
			return nil
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("look up base image: %w", err)
	}
	x.progress("image", "import %s", built.Name)
	_, err = images.Import(ctx, x.opts.Backend.Client, built)
	return err
}

// pending is work running beside the run's main line: wait returns its
// answer once it ended.
type pending[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// start runs f in the background.
func start[T any](f func() (T, error)) *pending[T] {
	p := &pending[T]{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.val, p.err = f()
	}()
	return p
}

// wait returns f's answer once it returned.
func (p *pending[T]) wait() (T, error) {
	<-p.done
	return p.val, p.err
}

// failure waits for the work, and adds its error to err when err does not
// hold it already: a background failure (a containerd that stopped
// answering, a tmpfs that would not mount) is named even when the main
// line failed first.
func (p *pending[T]) failure(err error) error {
	<-p.done
	if err != nil && p.err != nil && !errors.Is(err, p.err) {
		err = fmt.Errorf("%w; %w", err, p.err)
	}
	return err
}

// viewBase starts asking for the mounts of the base image's read-only
// view, which every run shares: one request, unless no run has made the
// view yet. The image's one layer is uncompressed, so its digest is the
// diff_id and the chain id of its unpacked snapshot: the view names it
// directly, and only a missing snapshot costs the image lookups and the
// import (rootfsMounts). It emits nothing: the run's events stay in
// order.
func (x *execution) viewBase(base *images.Image) *pending[[]mount.Mount] {
	return start(func() (m []mount.Mount, err error) {
		err = x.daemonCall(x.ctx, daemonDeadlines.create, func(ctx context.Context) (err error) {
			m, err = x.makeView(ctx, base)
			return err
		})
		return m, err
	})
}

// makeView returns the mounts of the base image's view, making its lease
// and the view when there are none yet (two runs making them at once both
// get the one view). The view is read-only and holds nothing of a run: the
// run's writable places are its own tmpfs mounts. It is held by its lease
// (ctx carries it, from x.ctx), so containerd's garbage collector leaves
// it, and the image's snapshot below it, alone.
func (x *execution) makeView(ctx context.Context, base *images.Image) ([]mount.Mount, error) {
	sn := x.opts.Backend.Client.SnapshotService(images.Snapshotter)
	key := BaseViewKey(base)
	m, err := sn.Mounts(ctx, key)
	if !errdefs.IsNotFound(err) {
		return m, err
	}
	if err := x.holdBaseLease(ctx, key); err != nil {
		return nil, err
	}
	parent := identity.ChainID([]digest.Digest{base.LayerDigest}).String()
	m, err = sn.View(ctx, key, parent, snapshots.WithLabels(map[string]string{images.BaseLabel: key}))
	if errdefs.IsAlreadyExists(err) {
		return sn.Mounts(ctx, key)
	}
	return m, err
}

// rootfsMounts returns the rootfs: an overlay with the runfiles tree above
// the layers of the base image view, importing the image first when
// containerd lacks its snapshot.
func (x *execution) rootfsMounts(v *pending[[]mount.Mount], base *images.Image) ([]mount.Mount, error) {
	view, err := v.wait()
	if errdefs.IsNotFound(err) {
		err = x.daemonCall(x.ctx, daemonDeadlines.create, func(ctx context.Context) error {
			if err := x.ensureImage(ctx, base); err != nil {
				return err
			}
			view, err = x.makeView(ctx, base)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("base image view: %w", err)
	}
	lowers := []string{x.treeDir}
	for _, m := range view {
		switch m.Type {
		case "bind":
			lowers = append(lowers, m.Source)
		case "overlay":
			for _, o := range m.Options {
				if l, ok := strings.CutPrefix(o, "lowerdir="); ok {
					lowers = append(lowers, strings.Split(l, ":")...)
				}
			}
		default:
			return nil, fmt.Errorf("base image view: unexpected %s mount", m.Type)
		}
	}
	opts, err := mounts.RootfsOverlayOptions(lowers)
	if err != nil {
		return nil, err
	}
	return []mount.Mount{{Type: "overlay", Source: "overlay", Options: opts}}, nil
}

// create makes the task, records the spawn and starts it.
func (x *execution) create() error {
	var stdoutR *io.PipeReader
	stdoutR, x.stdoutW = io.Pipe()
	var err error
	if x.stderr, err = x.openOutput(StderrFile, "stderr", 0o600); err != nil {
		return err
	}
	faultpoint.Reach(faultpoint.BeforeNewTask)
	inFlight := faultpoint.While(faultpoint.NewTask, x.shimStarted)
	err = x.daemonCall(x.ctx, daemonDeadlines.create, func(ctx context.Context) (err error) {
		x.task, err = x.container.NewTask(ctx, cio.NewCreator(x.stdioOpts()...), containerd.WithRootFS(x.rootfs))
		return err
	})
	inFlight()
	if err != nil {
		return fmt.Errorf("create task: %w", err)
	}
	faultpoint.Reach(faultpoint.TaskCreated)
	// Not x.ctx: cancelling hookbox must not look like the engine exiting.
	waitCtx, stopWaiting := context.WithCancel(context.WithoutCancel(x.ctx))
	x.stopWaiting = stopWaiting
	if x.exitCh, err = x.task.Wait(waitCtx); err != nil {
		return fmt.Errorf("wait task: %w", err)
	}
	pid := int(x.task.Pid())
	startTime, err := x.pinInit(pid)
	if err != nil {
		return err
	}
	if err := x.openCgroup(pid); err != nil {
		return err
	}
	spawned := &Spawned{SchemaVersion: 1, RunID: x.id, ContainerID: x.id, InitPID: pid, InitStartTime: startTime,
		CgroupsPath: x.cgroupsPath, RenderDigest: x.result.RenderDigest, StartedAt: time.Now().UTC()}
	var cgroupDir string
	if x.cg != nil {
		if id, err := x.cg.ID(); err == nil {
			spawned.CgroupID = id
		}
		cgroupDir = x.cg.Unified
	}
	if err := x.armTracer(pid, cgroupDir, spawned.CgroupID); err != nil {
		return err
	}
	if err := x.startEgress(pid); err != nil {
		return err
	}
	// Recorded before anything reads output, with every record file
	// written beside the run so far; failing to record is fatal
	// (docs/contracts.md §1): nothing may run unrecorded.
	data, err := recordJSON(spawned)
	if err != nil {
		return err
	}
	x.writeRecord(SpawnedFile, data)
	if err := x.recordsWritten(); err != nil {
		return err
	}
	x.emit(Event{Type: EventSpawned, Spawned: spawned})

	if x.stdout, err = x.openOutput(StdoutFile, "stdout", 0o644); err != nil {
		return err
	}
	x.activity = make(chan struct{}, 1)
	x.readerWG.Add(1)
	go x.readStdout(stdoutR)
	// The engine may print (and a reader react, e.g. with Ctrl-C) before
	// Start's reply arrives: once created, starting is not abandoned.
	faultpoint.Reach(faultpoint.BeforeStart)
	startErr := make(chan error, 1)
	x.deadline = time.Now().Add(time.Duration(x.r.Limits.TimeoutMS) * time.Millisecond)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), daemonDeadlines.create)
		defer cancel()
		startErr <- x.task.Start(ctx)
	}()
	running, err := x.awaitStart(startErr)
	if running {
		x.engineStarted = true
		return nil
	}
	if err = x.daemonFailed(err, daemonDeadlines.create); err != nil {
		// A containerd that died or hung mid-call may have started the
		// task before its reply was lost; its exit status is then the
		// engine's.
		x.engineStarted = x.initExecuted()
		return fmt.Errorf("start task: %w", err)
	}
	x.engineStarted = true
	x.makeAnchor()
	return nil
}

// awaitStart waits for containerd's answer to Start, or reports that the
// engine runs without one. Cancelled, or past the run's deadline, before
// containerd answered (it may hang), an engine that already runs is not
// left running until the reply: wait ends it on time and teardown through
// the kernel. One that does not run yet cannot have run the engine, and
// containerd's answer (or the create deadline) still decides.
func (x *execution) awaitStart(startErr <-chan error) (running bool, err error) {
	overdue := time.NewTimer(time.Until(x.deadline))
	defer overdue.Stop()
	cancelled := x.ctx.Done()
	for {
		select {
		case err := <-startErr:
			return false, err
		case <-cancelled:
			cancelled = nil
		case <-overdue.C:
		}
		if x.initExecuted() {
			return true, nil
		}
	}
}

// initExecuted reports whether the task's init no longer runs runc's
// binary: Start has exec'd it, whatever containerd answered.
func (x *execution) initExecuted() bool {
	exe, err := host.Exe(x.initPID)
	return err == nil && x.initExe != "" && exe != x.initExe
}

// pinInit opens a pidfd on the task's init and returns its start time, the
// identity the spawn record keeps (docs/contracts.md 1.3). On a kernel
// without pidfds init is only read, and containerd signals it.
func (x *execution) pinInit(pid int) (uint64, error) {
	x.initPID = pid
	x.initExe, _ = host.Exe(pid) // runc init's, until Start execs the init
	p, err := cgroup.OpenProcess(pid, 0)
	if errors.Is(err, cgroup.ErrNotSupported) {
		start, err := host.StartTime(pid)
		if err != nil {
			return 0, fmt.Errorf("read init start time: %w", err)
		}
		return start, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pin the task's init: %w", err)
	}
	x.init = p
	return p.StartTime, nil
}

func (x *execution) stdioOpts() []cio.Opt {
	var stdin io.Reader // none without secrets: the init reads nothing
	if x.secretStream != nil {
		stdin = bytes.NewReader(x.secretStream)
	}
	opts := []cio.Opt{cio.WithStreams(stdin, x.stdoutW, x.stderr)}
	if dir := x.opts.Backend.FIFODir; dir != "" {
		opts = append(opts, cio.WithFIFODir(dir))
	}
	return opts
}

// openCgroup gives init its cgroup once it exists (the backend's Place:
// the one runc made, or one hookbox makes in a delegated subtree before
// anything runs) and opens it. A run the backend cannot give a cgroup is
// degraded, not failed.
func (x *execution) openCgroup(initPID int) error {
	l := x.r.Limits
	limits := cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, MilliCPUs: l.MilliCPUs}
	p, degraded, err := x.opts.Backend.Cgroups.Place(x.id, initPID, limits)
	if err == nil {
		x.result.Degraded = append(x.result.Degraded, degraded...)
		if x.cg, err = cgroup.Open(p); err != nil {
			return fmt.Errorf("open run cgroup: %w", err)
		}
		return nil
	}
	// No cgroup of the run's own: every limit is off.
	x.noCgroup = err.Error()
	x.cgroupsPath = ""
	x.result.Degraded = append(x.result.Degraded, ReasonNoRunCgroup)
	x.result.Degraded = append(x.result.Degraded, cgroup.Unapplied(limits)...)
	x.progress("cgroup", "no cgroup of its own (%s): no limits, no trace", x.noCgroup)
	return nil
}

// readStdout copies the engine's stdout, up to its cap, to the record, the
// terminal and the event stream, and signals activity for the watchdogs
// (output beyond the cap is activity too).
func (x *execution) readStdout(r io.Reader) {
	defer x.readerWG.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if chunk := x.stdout.take(buf[:n]); len(chunk) > 0 {
				if x.opts.Stdout != nil {
					x.opts.Stdout.Write(chunk)
				}
				x.emit(Event{Type: EventOutput, Stream: "stdout", Data: string(bytes.Clone(chunk))})
			}
			select {
			case x.activity <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks until the engine exits, a watchdog fires or ctx is cancelled.
// The engine's exit is seen by the kernel (init's pidfd) or by containerd,
// whichever comes first; the watchdogs are hookbox's own timers, so they
// fire on time whatever containerd does.
func (x *execution) wait() {
	faultpoint.Reach(faultpoint.Running)
	l := x.r.Limits
	timeout := time.NewTimer(time.Until(x.deadline))
	defer timeout.Stop()
	var firstOutput, idle <-chan time.Time
	var idleTimer *time.Timer
	if x.r.Engine.StreamsEarly && l.FirstOutputMS > 0 {
		t := time.NewTimer(time.Duration(l.FirstOutputMS) * time.Millisecond)
		defer t.Stop()
		firstOutput = t.C
	}
	sawOutput := false
	for {
		select {
		case st := <-x.exitCh:
			x.exitCh = nil
			if err := st.Error(); err != nil {
				x.lostTask(err)
			} else {
				x.recordExit(st)
			}
			return
		case <-x.initDone():
			return // teardown collects the status
		case <-x.activity:
			if !sawOutput {
				sawOutput, firstOutput = true, nil
			}
			if x.r.Engine.StreamsEarly && l.IdleMS > 0 {
				if idleTimer == nil {
					idleTimer = time.NewTimer(time.Duration(l.IdleMS) * time.Millisecond)
					defer idleTimer.Stop()
				} else {
					idleTimer.Reset(time.Duration(l.IdleMS) * time.Millisecond)
				}
				idle = idleTimer.C
			}
		case <-timeout.C:
			x.killedFor = ReasonTimeout
			return
		case <-firstOutput:
			x.killedFor = ReasonFirstOutput
			return
		case <-idle:
			x.killedFor = ReasonIdle
			return
		case <-x.ctx.Done():
			x.killedFor = ReasonSignal
			return
		}
	}
}

func (x *execution) recordExit(st containerd.ExitStatus) {
	x.shimExited = true
	if !x.engineStarted || x.result.ExitCode != nil {
		return
	}
	code := int(st.ExitCode())
	x.result.ExitCode = &code
}

// lostTask: containerd stopped reporting on the task (it died, or the
// wait broke) while the engine ran. hookbox can no longer account for the
// run through it, so the run ends as an infrastructure error and teardown
// ends the engine through the kernel.
func (x *execution) lostTask(err error) {
	x.noteDaemonError(err)
	x.result.Status = StatusInfraError
	x.result.Error = strings.TrimPrefix(x.result.Error+"; containerd stopped reporting on the task: "+err.Error(), "; ")
}

// teardown ends every process of the run and removes every resource. It
// runs to completion whatever happens to the caller's context
// (docs/contracts.md §2), and every step counts an already-gone resource
// as cleaned.
func (x *execution) teardown() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), x.opts.Grace+2*time.Minute)
	defer cancel()
	var problems []string
	fail := func(step string, err error) {
		if err != nil {
			problems = append(problems, step+": "+err.Error())
		}
	}

	if x.task != nil {
		stopErr := x.stopAll(ctx)
		fail("stop", stopErr)
		x.stopped = stopErr == nil && (x.cg != nil || x.init != nil)
		oom := x.cg != nil && cgroupOOM(x.cg)
		faultpoint.Reach(faultpoint.BeforeTaskDelete)
		inFlight := faultpoint.While(faultpoint.TaskDelete, x.shimDeleting())
		fail("delete task", x.daemonStep(ctx, "task", x.deleteTask))
		inFlight()
		x.decideStatus(oom)
	}
	if x.stopWaiting != nil {
		x.stopWaiting()
	}
	if x.init != nil {
		x.init.Close()
	}
	// The engine is gone: end its proxied connections and sum them up.
	fail("stop egress proxy", x.stopEgress())
	if x.stdoutW != nil {
		x.stdoutW.Close()
		x.readerWG.Wait()
	}
	x.stopTrace()
	x.recordOutput()
	// Harvest and unmount the tmpfs while containerd deletes the rest: the
	// two touch nothing in common.
	var unmountErr error
	var harvested sync.WaitGroup
	if x.runDir != "" {
		harvested.Add(1)
		go func() {
			defer harvested.Done()
			x.harvest()
			faultpoint.Reach(faultpoint.Unmount)
			unmountErr = retry(func() error { return mounts.Unmount(x.runDir) })
			if x.workspaceStore != "" {
				unmountErr = errors.Join(unmountErr, retry(func() error { return mounts.Unmount(x.workspaceStore) }))
			}
		}()
	}
	fail("delete container", x.daemonStep(ctx, "container", x.deleteContainer))
	if x.cg != nil {
		if err := retry(x.cg.Remove); err != nil {
			fail("remove cgroup", err)
			x.result.Leftovers = append(x.result.Leftovers, "cgroup")
		}
	}
	harvested.Wait()
	if unmountErr != nil {
		fail("unmount run dir", unmountErr)
		x.result.Leftovers = append(x.result.Leftovers, "tmpfs")
	}
	if x.daemonErr != nil {
		x.result.Reasons = append(x.result.Reasons, ReasonContainerdUnreachable)
	}
	if len(x.result.Leftovers) > 0 {
		left := "left for hookbox gc: " + strings.Join(x.result.Leftovers, ", ")
		if x.daemonErr != nil {
			left += fmt.Sprintf(" (it removes them once containerd at %s answers again)", x.opts.Backend.Address)
		}
		problems = append(problems, left)
	}
	if len(problems) > 0 {
		x.result.Reasons = append(x.result.Reasons, ReasonTeardownIncomplete)
		if x.result.Status != StatusInfraError {
			x.result.Status = StatusInfraError
		}
		x.result.Error = strings.TrimPrefix(x.result.Error+"; teardown: "+strings.Join(problems, "; "), "; ")
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/launcher/rootless"
	"hookbox.dev/hookbox/notify"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
	"hookbox.dev/hookbox/runfiles"
)

// Exit codes of `hookbox run` besides the engine's own (README "Exit codes").
// They avoid 0, 1, 2, 126, 127 and 128+n, which engines and shells use.
const (
	// exitRefused: something is not what its digest or signature says it
	// must be (run --expect-digest; verify: the record or its attestation).
	exitRefused   = 118
	exitInfra     = 120 // hookbox could not run or finish the run
	exitTimedOut  = 121
	exitCancelled = 122
	exitContract  = 123 // exited 0 without its declared artifacts
	exitMismatch  = 124 // the trace contradicts the render (mode verify or enforce)
	exitOOM       = 125
)

// processStart is when this process started, as the kernel counts it
// (to a clock tick, 10 ms), else this package's init, which follows the Go
// runtime's start and every imported package's init: a run's timings
// count from it.
var processStart = func() time.Time {
	now := time.Now()
	if age, err := host.Age(os.Getpid()); err == nil && age >= 0 {
		return now.Add(-age)
	}
	return now
}()

// exitError carries a run's exit code out of cobra.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func newRunCommand(h *hostFlags) *cobra.Command {
	var spawn string
	var jsonOut, requireTrace, noNotify, rootlessFlag, requireSignature, verifyRunfiles bool
	var signingKey, expectDigest string
	var grace, notifyTimeout time.Duration
	var notifyArgv string
	var traceRingSize int
	var sets []string
	cmd := &cobra.Command{
		Use:   "run SPEC",
		Short: "Run a spawn in a container and record the run",
		Long: `Compile SPEC and run the spawn as a containerd task: runfiles and workspace
read-only, a tmpfs run dir as the only writable place, no network. The run
record (render, OCI spec, spawn record, stdout, stderr, artifacts, result)
is written under the state directory's runs/. --json prints one JSON event per line
(progress, spawned, output, result, notify).

Once the result is written, a notifier configured by --notify, else the
spec's notify block, else the notify block of the global config file
($HOOKBOX_CONFIG, else $XDG_CONFIG_HOME/hookbox/config.yaml, read after
/etc/hookbox/config.yaml as root) runs on the host: no shell, its own process group, a deadline (default 30s). It gets the
terminal envelope as JSON on stdin and as the argv element {payload}
({result_path} and {run_id} too). Its outcome is result.json's notify
section; it never changes the run's status or exit code, and a notify
configuration error is reported there instead of failing the run.

Before the notifier, the run writes its attestation (attestation.dsse.json):
an in-toto statement over the artifacts, render, trace, network record,
every file of the record and the verdict, signed with this host's key
(hookbox key generate) or --signing-key; without a key it is unsigned and
result.json says so (--require-signature refuses to run instead).

--expect-digest D runs the spawn only if D is its plan digest or its
content digest, as hookbox render prints them (docs/architecture.md
"Digests"); anything else exits 118 before any run record, container or
mount exists. result.json records both digests.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resumeCollection := holdCollection(startupHeapLimit)
			defer resumeCollection()
			address, stateDir, cacheDir := h.address, h.stateDir, h.cacheDir
			inner, isInner := rootless.Inner()
			dirs := dirsFrom(stateDir, cacheDir, inner)
			// A containerd that already answers is connected to while the
			// spec compiles (rootful only; none is started for it).
			var early *launcher.EarlyDial
			if !isInner && !rootlessFlag && !rootlessUser() {
				early = launcher.DialEarly(cmd.Context(), address, daemonOptions(false, dirs.daemon, nil))
				defer early.Close()
			}
			params, err := compiler.ParseSetFlags(sets)
			if err != nil {
				return usageError{err}
			}
			parsed, err := compiler.ReadFileWithOptions(args[0], compiler.HostChecks(params))
			if err != nil {
				return err
			}
			renders, err := compiler.CompileAll(parsed)
			if err != nil {
				return err
			}
			r, err := pickSpawn(renders, spawn, args[0])
			if err != nil {
				return err
			}
			if expectDigest != "" && !render.ValidDigest(expectDigest) {
				return usageError{fmt.Errorf("--expect-digest %q: give a digest as hookbox render prints it, sha256:<64 lowercase hex digits>", expectDigest)}
			}
			// A key that cannot be used fails the run before anything starts.
			signer, unsigned, err := runSigner(config.HostEnv(), signingKey, requireSignature)
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			// Before anything of a run exists: before a containerd is
			// started or RootlessKit's namespaces are entered.
			assembled, err := checkExpectedDigest(cmd.Context(), r, expectDigest, dirs.cache, verifyRunfiles)
			if err != nil {
				return err
			}
			progress := func(phase string) func(string) {
				return func(msg string) { progressLine(cmd.ErrOrStderr(), jsonOut, phase, msg) }
			}
			backend := launcher.BackendConfig{Address: address, Daemon: daemonOptions(true, dirs.daemon, progress("containerd")),
				Traced: r.Trace.Mode != render.TraceOff, TraceRingSize: traceRingSize, Early: early,
				NoShimGroup: os.Getenv(envShimGroup) == "off"}
			if exe, err := os.Executable(); err == nil {
				backend.ShimFront, _ = launcher.FindShimFront(exe)
				if !rootlessUser() {
					backend.ManagedTracer = &launcher.ManagedTracerConfig{Executable: exe, RuntimeDir: os.Getenv(envRuntimeDir)}
				}
			}
			if !isInner && (rootlessFlag || rootlessUser()) {
				if !rootlessUser() {
					return usageError{errors.New("--rootless: run hookbox as the non-root user whose rootless containerd it should use (as root, hookbox runs rootful)")}
				}
				backend.Daemon.Progress = progress("rootless")
				return exitError{exitInfra, launcher.EnterRootless(cmd.Context(), backend, dirs.state, dirs.cache, os.Args[1:]).Error()}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()                                                                 // a second signal must not kill hookbox mid-teardown
			flagged := cmd.Flags().Changed("notify") || cmd.Flags().Changed("no-notify") // --notify-timeout alone adds no layer
			global, err := config.LoadHost()
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			plan := notify.Resolve(notifyconf.FlagSetting(flagged, notifyArgv, notifyTimeout, noNotify), compiler.NotifySetting(parsed, r.Spawn), global.Notify)
			return runSpawn(ctx, cmd, r, backend, runFlags{dirs: dirs, json: jsonOut, grace: grace, requireTrace: requireTrace, verifyRunfiles: verifyRunfiles, notify: plan, secrets: global.Secrets,
				signer: signer, unsigned: unsigned, runfiles: assembled, resumeCollection: resumeCollection})
		},
	}
	cmd.Flags().StringVar(&spawn, "spawn", "", "the spawn to run when SPEC holds several")
	cmd.RegisterFlagCompletionFunc("spawn", completeSpawnNames)
	cmd.Flags().StringArrayVar(&sets, "set", nil, "NAME=VALUE: fill the spec's template slot NAME (repeatable), as for hookbox render")
	cmd.Flags().BoolVar(&rootlessFlag, "rootless", false, "use the rootless backend (the default when not root): a rootless containerd under RootlessKit")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print a stable stream of JSON events instead of human output")
	cmd.Flags().DurationVar(&grace, "grace", launcher.DefaultGrace, "time between SIGTERM and SIGKILL at teardown")
	cmd.Flags().BoolVar(&requireTrace, "require-trace", false, "fail before the engine starts when the exec tracer is unavailable")
	cmd.Flags().BoolVar(&verifyRunfiles, "verify-runfiles", false, "re-hash every runfiles store object the run mounts before its container is created, instead of the quick check against each object's seal (CI; catches a forged seal too)")
	cmd.Flags().IntVar(&traceRingSize, "trace-ring-size", 0, "ring buffer bytes of the exec tracer when hookbox loads it itself, not through a tracer helper (a power of two, default 4 MiB); a burst of execs beyond it is lost and the verdict unchecked (events-lost)")
	cmd.Flags().StringVar(&notifyArgv, "notify", "", `notifier argv for this run, as a JSON list ('["/usr/local/bin/post", "{payload}"]') or a string split as POSIX words without shell features; overrides the spec and global config`)
	cmd.Flags().DurationVar(&notifyTimeout, "notify-timeout", 0, "deadline of the --notify notifier (default 30s)")
	cmd.Flags().BoolVar(&noNotify, "no-notify", false, "run no notifier for this run, whatever the spec or global config says")
	cmd.Flags().StringVar(&signingKey, "signing-key", "", "sign the attestation with this ed25519 private key (PKCS#8 PEM, mode 0600) instead of the host's (hookbox key generate)")
	cmd.Flags().BoolVar(&requireSignature, "require-signature", false, "refuse to run when there is no key to sign the attestation with")
	cmd.Flags().StringVar(&expectDigest, "expect-digest", "", "run only if this is the spawn's plan or content digest (hookbox render --format text shows both); exit 118 otherwise, before anything is created")
	return cmd
}

type runFlags struct {
	dirs           hostDirs
	json           bool
	grace          time.Duration
	requireTrace   bool
	verifyRunfiles bool
	notify         notify.Plan
	secrets        secretsconf.Lookup
	signer         *attest.Signer // nil: the attestation is unsigned, for the reason in unsigned
	unsigned       string
	runfiles       *runfiles.Result // assembled by checkExpectedDigest, or nil
	// resumeCollection ends holdCollection's hold (once; later calls do
	// nothing).
	resumeCollection func()
}

// checkExpectedDigest refuses a render that --expect-digest does not name
// (exit 118). To compare the content digest it assembles the runfiles,
// which the run then mounts.
func checkExpectedDigest(ctx context.Context, r *render.Render, want, cacheDir string, verifyRunfiles bool) (*runfiles.Result, error) {
	if want == "" {
		return nil, nil
	}
	store, err := runfiles.OpenStore(cacheDir)
	if err != nil {
		return nil, exitError{exitInfra, err.Error()}
	}
	assembled, err := plan.CheckDigest(ctx, store, r, want, launcher.RunfilesOptions(verifyRunfiles))
	switch {
	case errors.Is(err, plan.ErrDigestRefused):
		return nil, exitError{exitRefused, "--expect-digest: " + err.Error()}
	case err != nil:
		return nil, exitError{exitInfra, err.Error()}
	}
	return assembled, nil
}

func pickSpawn(renders []*render.Render, name, file string) (*render.Render, error) {
	if name != "" {
		if picked := selectSpawn(renders, name); picked != nil {
			return picked[0], nil
		}
		return nil, usageError{fmt.Errorf("--spawn %q: no such spawn in %s", name, file)}
	}
	if len(renders) > 1 {
		var names []string
		for _, r := range renders {
			names = append(names, r.Spawn)
		}
		return nil, usageError{fmt.Errorf("%s holds %d spawns (%s): choose one with --spawn", file, len(renders), strings.Join(names, ", "))}
	}
	return renders[0], nil
}

func runSpawn(ctx context.Context, cmd *cobra.Command, r *render.Render, cfg launcher.BackendConfig, f runFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	backend, err := launcher.Connect(ctx, cfg)
	if err != nil {
		return exitError{exitInfra, err.Error()}
	}
	defer backend.Close()
	opts := launcher.Options{Backend: backend, StateDir: f.dirs.state, CacheDir: f.dirs.cache, Grace: f.grace, Version: version,
		RequireTrace: f.requireTrace, VerifyRunfiles: f.verifyRunfiles, Notify: f.notify, SecretLookup: f.secrets, Signer: f.signer, Unsigned: f.unsigned, Runfiles: f.runfiles,
		ProcessStart: processStart, ReleaseTracer: true}
	if f.notify.Warning != "" && !f.json {
		fmt.Fprintf(stderr, "hookbox: warning: %s\n", f.notify.Warning)
	}
	if f.json {
		opts.Sink = launcher.NewJSONSink(stdout)
	} else {
		opts.Stdout = stdout
		opts.Sink = launcher.SinkFunc(func(e launcher.Event) {
			switch e.Type {
			case launcher.EventProgress:
				progressLine(stderr, false, e.Phase, e.Detail)
			case launcher.EventSpawned:
				progressLine(stderr, false, "spawned", fmt.Sprintf("%s pid %d cgroup %s", e.RunID, e.Spawned.InitPID, e.Spawned.CgroupsPath))
			}
		})
	}
	sink := opts.Sink
	opts.Sink = launcher.SinkFunc(func(e launcher.Event) {
		if e.Type == launcher.EventSpawned {
			time.AfterFunc(collectionResumeDelay, f.resumeCollection)
		}
		sink.Emit(e)
	})
	res, err := launcher.Run(ctx, r, opts)
	if err != nil {
		return exitError{exitInfra, err.Error()}
	}
	if !f.json {
		// The whole process: what followed the result (attestation,
		// notifier) is finish too.
		total := time.Since(processStart).Milliseconds()
		res.Timings.Finish += total - res.Timings.Total
		res.Timings.Total = total
		printSummary(stderr, res)
	}
	// The notify line carries only the redacted snippet and the path of the
	// raw stderr (docs/contracts.md §4).
	if !f.json && res.Notify != nil && res.Notify.Reason != notify.ReasonNotConfigured {
		fmt.Fprintf(stderr, "hookbox: notify   %s\n", res.Notify.Describe())
	}
	code := exitCodeOf(res)
	if code == 0 {
		return nil
	}
	return exitError{code, fmt.Sprintf("run %s: %s", res.RunID, res.Status)}
}

// startupHeapLimit bounds the heap while collection is held: a run that
// assembles a large runfiles tree is collected once it reaches it.
const startupHeapLimit = 64 << 20

// collectionResumeDelay is how long after the engine's spawn collection
// resumes: past the start and, for a short run, its teardown, which wait
// on containerd with the host's two cores busy.
const collectionResumeDelay = 500 * time.Millisecond

// holdCollection stops garbage collection until the returned function is
// called, unless the heap reaches limit first. A run allocates most of
// what it ever does while it prepares, on the path its engine's start
// waits for, where a collection (two in a trivial run) costs wall time on
// a two-core host that containerd and runc share. hookbox run resumes it
// collectionResumeDelay after the engine's spawn, so a long run is
// collected as usual (GOGC and GOMEMLIMIT then apply again). Measured
// (2026-12-02, 60 interleaved trivial runs each, medians): 125.5 ms
// collected throughout, 114.7 ms resumed at the spawn, 113.8 ms resumed
// after the delay, 115.2 ms with GOGC=off; peak RSS 35.8 MiB, was 36.7.
func holdCollection(limit int64) func() {
	percent := debug.SetGCPercent(-1)
	previous := debug.SetMemoryLimit(-1) // reads it
	debug.SetMemoryLimit(min(limit, previous))
	var once sync.Once
	return func() {
		once.Do(func() {
			debug.SetMemoryLimit(previous)
			debug.SetGCPercent(percent)
		})
	}
}

// daemonOptions are the daemon package's options for a command, with the
// environment's overrides (envSystemAddress, envRuntimeDir).
func daemonOptions(autoStart bool, stateDir string, progress func(string)) daemon.Options {
	return daemon.Options{
		AutoStart:     autoStart,
		StateDir:      stateDir,
		RuntimeDir:    os.Getenv(envRuntimeDir),
		SystemAddress: os.Getenv(envSystemAddress),
		Progress:      progress,
	}
}

func progressLine(w io.Writer, quiet bool, phase, detail string) {
	if quiet {
		return
	}
	if f, ok := w.(*os.File); ok && !term.IsTerminal(int(f.Fd())) && os.Getenv(envProgress) == "" {
		return
	}
	fmt.Fprintf(w, "hookbox: %-10s %s\n", phase, detail)
}

func printSummary(w io.Writer, res *launcher.Result) {
	code := "-"
	if res.ExitCode != nil {
		code = fmt.Sprint(*res.ExitCode)
	}
	fmt.Fprintf(w, "hookbox: %s  exit %s  run %s\n", res.Status, code, res.RunID)
	t := res.Timings
	fmt.Fprintf(w, "hookbox: timings  startup %dms  prepare %dms  create %dms  run %dms  teardown %dms  verify %dms  finish %dms  total %dms\n",
		t.Startup, t.Prepare, t.Create, t.Run, t.Teardown, t.Verify, t.Finish, t.Total)
	for _, a := range res.Artifacts {
		fmt.Fprintf(w, "hookbox: artifact %s  %s %s\n", terminalSafe(a.Declared), a.Status, terminalSafe(a.Path))
	}
	if len(res.Reasons) > 0 {
		fmt.Fprintf(w, "hookbox: reasons  %s\n", strings.Join(res.Reasons, ", "))
	}
	if res.Error != "" {
		fmt.Fprintf(w, "hookbox: error    %s\n", res.Error)
	}
	why := ""
	if len(res.Trace.Reasons) > 0 {
		why = " (" + strings.Join(res.Trace.Reasons, ", ") + ")"
	}
	fmt.Fprintf(w, "hookbox: trace    %s%s %d execs\n", res.Trace.Status, why, res.Trace.Events)
	if res.Trace.Detail != "" {
		fmt.Fprintf(w, "hookbox:   why    %s\n", res.Trace.Detail)
	}
	if n := res.Network; n != nil && n.Mode == render.NetworkAllowlist {
		fmt.Fprintf(w, "hookbox: network  %d allowed, %d refused through the egress proxy (%s)\n", n.Allowed, n.Refused, launcher.NetworkFile)
		for _, r := range n.Refusals {
			fmt.Fprintf(w, "hookbox:   refused %s:%d %s ×%d\n", r.Host, r.Port, r.Reason, r.Attempts)
		}
	}
	if len(res.Degraded) > 0 {
		fmt.Fprintf(w, "hookbox: degraded %s (hookbox doctor says why and how to fix)\n", strings.Join(res.Degraded, ", "))
	}
	for _, d := range res.Trace.Diffs {
		fmt.Fprintf(w, "hookbox:   diff   %s %s[%d]: want %q got %q (pid %d)\n", d.Rule, d.Field, d.Index, d.Want, d.Got, d.EventPID)
	}
	if a := res.Attestation; a != nil {
		switch {
		case a.Error != "":
			fmt.Fprintf(w, "hookbox: attest   none: %s\n", a.Error)
		case a.Signed:
			fmt.Fprintf(w, "hookbox: attest   %s signed by %s\n", a.File, a.KeyID)
		default:
			fmt.Fprintf(w, "hookbox: attest   %s unsigned: %s\n", a.File, a.Unsigned)
		}
	}
	fmt.Fprintf(w, "hookbox: record   %s\n", res.RecordDir)
}

// exitCodeOf maps a result to hookbox's exit code (README "Exit codes").
func exitCodeOf(res *launcher.Result) int {
	if res.Trace.Status == verify.StatusMismatch && res.Trace.Mode.Judged() &&
		(res.Status == launcher.StatusCompleted || res.Status == launcher.StatusFailed || res.Status == launcher.StatusCompletedEmpty) {
		return exitMismatch
	}
	switch res.Status {
	case launcher.StatusCompleted, launcher.StatusFailed:
		if res.ExitCode != nil {
			return *res.ExitCode
		}
		return exitInfra
	case launcher.StatusCompletedEmpty:
		return exitContract
	case launcher.StatusTimedOut:
		return exitTimedOut
	case launcher.StatusCancelled:
		return exitCancelled
	case launcher.StatusOOMKilled:
		return exitOOM
	}
	return exitInfra
}

// terminalSafe is s as is when every rune is printable, else s quoted (Go
// syntax: control characters escaped), so a name the engine chose cannot
// drive the terminal hookbox prints to.
func terminalSafe(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

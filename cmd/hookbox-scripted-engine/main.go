// Command hookbox-scripted-engine is hookbox's deterministic engine: it runs
// a script (render.Script) step by step so tests, demos and pipeline dry runs
// exercise every launcher path with no network and no credentials. It runs
// hooks exactly as Claude Code does, from the same settings file.
//
// It re-execs itself for children (Go cannot fork without exec): argv[0]
// hookbox-scripted-daemon for a daemonizing child, hookbox-scripted-child for
// a sleeping one. Both names are declared in the render.
//
// It is built static (CGO_ENABLED=0) so its runfiles closure is one file.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hookbox.dev/hookbox/internal/probe"
	"hookbox.dev/hookbox/render"
)

// Self-exec names; they must match compiler.ScriptedDaemonArgv0 and
// compiler.ScriptedChildArgv0 (a test checks).
const (
	daemonArgv0 = "hookbox-scripted-daemon"
	childArgv0  = "hookbox-scripted-child"
)

// kept holds allocated memory so the collector cannot free it.
var kept [][]byte

func main() {
	switch filepath.Base(os.Args[0]) {
	case daemonArgv0:
		runDaemon(os.Args[1:])
		return
	case childArgv0:
		runChild(os.Args[1:])
		return
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("hookbox-scripted-engine", flag.ContinueOnError)
	scriptPath := fs.String("script", render.ScriptPath, "script file")
	settingsPath := fs.String("settings", "", "Claude Code settings file with hooks")
	prompt := fs.String("prompt", "", "the prompt (printed in the init event)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	script, err := readScript(*scriptPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hookbox-scripted-engine:", err)
		return 2
	}
	e := &engine{settingsPath: *settingsPath, prompt: *prompt}
	for i, step := range script.Steps {
		if code, exit := e.step(step); exit {
			return code
		} else if code != 0 {
			fmt.Fprintf(os.Stderr, "hookbox-scripted-engine: step %d failed\n", i)
			return code
		}
	}
	return 0
}

func readScript(path string) (*render.Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s render.Script
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Version != render.ScriptVersion {
		return nil, fmt.Errorf("%s: script version %d, this engine runs version %d", path, s.Version, render.ScriptVersion)
	}
	return &s, nil
}

type engine struct {
	settingsPath string
	prompt       string
}

// emit prints one NDJSON event on stdout.
func emit(v any) {
	data, _ := json.Marshal(v)
	os.Stdout.Write(append(data, '\n'))
}

// step runs one step; exit reports an exit step (code is its exit code),
// otherwise a non-zero code is a failed step.
func (e *engine) step(s render.ScriptStep) (code int, exit bool) {
	switch {
	case len(s.Print) > 0:
		var text string
		if json.Unmarshal(s.Print, &text) == nil {
			fmt.Println(text)
		} else {
			os.Stdout.Write(append(bytes.Clone(s.Print), '\n'))
		}
	case s.Stderr != "":
		fmt.Fprintln(os.Stderr, s.Stderr)
	case s.SleepMS > 0:
		time.Sleep(time.Duration(s.SleepMS) * time.Millisecond)
	case s.Write != nil:
		if err := os.MkdirAll(filepath.Dir(s.Write.Path), 0o755); err != nil {
			return fail("write", err)
		}
		if err := os.WriteFile(s.Write.Path, []byte(s.Write.Content), 0o644); err != nil {
			return fail("write", err)
		}
	case s.Hook != nil:
		return e.fireHook(s.Hook.Event, s.Hook.Tool), false
	case s.Daemonize != nil:
		if err := startSelf(daemonArgv0, true, "stage1", s.Daemonize.Marker); err != nil {
			return fail("daemonize", err)
		}
	case s.AllocateBytes > 0:
		buf := make([]byte, s.AllocateBytes)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		kept = append(kept, buf)
		emit(map[string]any{"type": "allocated", "bytes": s.AllocateBytes})
	case s.Fork != nil:
		var children []*exec.Cmd
		for i := 0; i < s.Fork.Count; i++ {
			child, err := startChild(strconv.FormatInt(s.Fork.SleepMS, 10), strconv.FormatInt(s.Fork.AllocateBytes, 10))
			if err != nil {
				emit(map[string]any{"type": "fork", "started": len(children), "error": err.Error()})
				return 1, false
			}
			children = append(children, child)
		}
		emit(map[string]any{"type": "fork", "started": len(children)})
		if !s.Fork.Wait {
			for _, c := range children {
				c.Process.Release()
			}
			break
		}
		for _, c := range children {
			err := c.Wait()
			emit(map[string]any{"type": "child_exit", "pid": c.Process.Pid, "how": c.ProcessState.String(), "error": errText(err)})
		}
	case s.EnvHash != "":
		sum := sha256.Sum256([]byte(os.Getenv(s.EnvHash)))
		emit(map[string]any{"type": "env_hash", "name": s.EnvHash, "sha256": hex.EncodeToString(sum[:])})
	case len(s.Exec) > 0:
		cmd := exec.Command(s.Exec[0], s.Exec[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err := cmd.Run()
		emit(map[string]any{"type": "exec", "argv": s.Exec, "exit_code": exitCode(err), "error": errText(err)})
	case s.Probe != nil:
		emit(probe.Run(s.Probe.Paths, s.Probe.Dial, []string{render.RunDir, render.TmpDir}, 2*time.Second))
	case s.Exit != nil:
		return *s.Exit, true
	}
	return 0, false
}

func fail(what string, err error) (int, bool) {
	fmt.Fprintf(os.Stderr, "hookbox-scripted-engine: %s: %v\n", what, err)
	return 1, false
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

func errText(err error) string {
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) {
		return ""
	}
	return err.Error()
}

// startSelf re-execs this binary under argv0, optionally in a new session,
// and does not wait for it.
func startSelf(argv0 string, setsid bool, args ...string) error {
	cmd := selfCommand(argv0, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// startChild starts a fork child (runChild), for the caller to wait for or
// release.
func startChild(args ...string) (*exec.Cmd, error) {
	cmd := selfCommand(childArgv0, args...)
	return cmd, cmd.Start()
}

func selfCommand(argv0 string, args ...string) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = argv0
	return cmd
}

// runDaemon is the classic double fork: stage1 (already in a new session)
// starts stage2 and exits, so stage2 is orphaned; stage2 ignores SIGTERM and
// sleeps until killed. The marker stays in its argv for tests to find.
func runDaemon(args []string) {
	if len(args) == 2 && args[0] == "stage1" {
		if err := startSelf(daemonArgv0, false, "stage2", args[1]); err != nil {
			os.Exit(1)
		}
		return
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	for {
		time.Sleep(time.Hour)
	}
}

// runChild is a fork child: hookbox-scripted-child SLEEP_MS [ALLOCATE_BYTES]
// allocates and touches ALLOCATE_BYTES, then sleeps SLEEP_MS (forever when
// 0).
func runChild(args []string) {
	ms, _ := strconv.ParseInt(firstOr(args, "0"), 10, 64)
	if len(args) > 1 {
		n, _ := strconv.ParseInt(args[1], 10, 64)
		buf := make([]byte, max(n, 0))
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		kept = append(kept, buf)
	}
	if ms <= 0 {
		for {
			time.Sleep(time.Hour)
		}
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
}

func firstOr(args []string, def string) string {
	if len(args) > 0 {
		return args[0]
	}
	return def
}

// settings is the hooks part of a Claude Code settings file.
type settings struct {
	Hooks map[string][]struct {
		Matcher string `json:"matcher"`
		Hooks   []struct {
			Type    string   `json:"type"`
			Command string   `json:"command"`
			Args    []string `json:"args"`
			Timeout int      `json:"timeout"`
		} `json:"hooks"`
	} `json:"hooks"`
}

// fireHook runs every handler of event whose matcher accepts tool, as
// Claude Code does: a handler with args is exec'd directly with
// [command, args...]; one with only a command runs as /bin/sh -c command.
// The event's JSON goes to stdin; the outcome is one NDJSON event each.
func (e *engine) fireHook(event, tool string) int {
	if e.settingsPath == "" {
		fmt.Fprintln(os.Stderr, "hookbox-scripted-engine: a hook step needs --settings")
		return 1
	}
	data, err := os.ReadFile(e.settingsPath)
	if err != nil {
		code, _ := fail("hook", err)
		return code
	}
	var s settings
	if err := json.Unmarshal(data, &s); err != nil {
		code, _ := fail("hook settings", err)
		return code
	}
	payload, _ := json.Marshal(map[string]any{
		"session_id": "scripted", "hook_event_name": event, "cwd": mustGetwd(), "tool_name": tool, "prompt": e.prompt,
	})
	for _, group := range s.Hooks[event] {
		if !matches(group.Matcher, tool) {
			continue
		}
		for _, h := range group.Hooks {
			var cmd *exec.Cmd
			if h.Args != nil {
				cmd = exec.Command(h.Command, h.Args...)
			} else {
				cmd = exec.Command("/bin/sh", "-c", h.Command)
			}
			cmd.Stdin = bytes.NewReader(payload)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			timeout := time.Duration(h.Timeout) * time.Second
			if timeout <= 0 {
				timeout = 60 * time.Second
			}
			err := runWithTimeout(cmd, timeout)
			emit(map[string]any{"type": "system", "subtype": "hook_response", "hook_event": event,
				"command": h.Command, "exit_code": exitCode(err), "error": errText(err), "stdout": out.String()})
		}
	}
	return 0
}

func runWithTimeout(cmd *exec.Cmd, timeout time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	timer := time.AfterFunc(timeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	return cmd.Wait()
}

// matches applies a Claude Code matcher: empty or "*" matches everything;
// otherwise a regular expression anchored on the tool name.
func matches(matcher, tool string) bool {
	if matcher == "" || matcher == "*" {
		return true
	}
	re, err := regexp.Compile("^(?:" + matcher + ")$")
	if err != nil {
		return strings.EqualFold(matcher, tool)
	}
	return re.MatchString(tool)
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return wd
}

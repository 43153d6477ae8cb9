package render

import "encoding/json"

// ScriptVersion is the version of the scripted engine's script format.
const ScriptVersion = 1

// ScriptPath is where the scripted engine finds its script in the container.
const ScriptPath = ConfigDir + "/script.json"

// Script is the program of hookbox's deterministic scripted engine
// (hookbox-scripted-engine): steps run in order; the engine exits 0 after
// the last step unless a step exits first. It lets tests and pipeline dry
// runs exercise every launcher path with no network and no credentials.
type Script struct {
	Version int          `json:"version"`
	Steps   []ScriptStep `json:"steps"`
}

// ScriptStep sets exactly one action.
type ScriptStep struct {
	// Print writes one line to stdout: a JSON string as its text, any other
	// JSON value as one line of JSON (NDJSON).
	Print json.RawMessage `json:"print,omitempty"`
	// Stderr writes one line to stderr.
	Stderr string `json:"stderr,omitempty"`
	// SleepMS sleeps.
	SleepMS int64 `json:"sleep_ms,omitempty"`
	// Write creates or replaces a file (parents created) under RunDir.
	Write *ScriptWrite `json:"write,omitempty"`
	// Hook fires a hook event the way Claude Code does: every handler of
	// that event in the settings file (whose matcher matches Tool, for tool
	// events) runs with the event's JSON on stdin; exec form (command +
	// args) directly, command alone with /bin/sh -c.
	Hook *ScriptHook `json:"hook,omitempty"`
	// Daemonize starts a child that calls setsid, forks again, ignores
	// SIGTERM and sleeps forever, with Marker in its argv.
	Daemonize *ScriptDaemonize `json:"daemonize,omitempty"`
	// AllocateBytes allocates and touches memory, and keeps it.
	AllocateBytes int64 `json:"allocate_bytes,omitempty"`
	// Fork starts Count children that each allocate AllocateBytes and sleep
	// SleepMS (forever when 0); with Wait the engine waits for them and
	// prints how each ended.
	Fork *ScriptFork `json:"fork,omitempty"`
	// EnvHash prints "sha256:<hex>" of the named variable's value.
	EnvHash string `json:"env_hash,omitempty"`
	// Exec runs a program and waits for it; its exit status is printed.
	Exec []string `json:"exec,omitempty"`
	// Probe prints one "probe" event: what the engine sees of its sandbox
	// (package internal/probe).
	Probe *ScriptProbe `json:"probe,omitempty"`
	// Exit ends the engine with this code.
	Exit *int `json:"exit,omitempty"`
}

type ScriptHook struct {
	Event string `json:"event"`
	Tool  string `json:"tool,omitempty"`
}

type ScriptWrite struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type ScriptProbe struct {
	Paths []string `json:"paths,omitempty"`
	Dial  []string `json:"dial,omitempty"`
}

type ScriptDaemonize struct {
	Marker string `json:"marker"`
}

type ScriptFork struct {
	Count         int   `json:"count"`
	SleepMS       int64 `json:"sleep_ms,omitempty"`
	AllocateBytes int64 `json:"allocate_bytes,omitempty"`
	Wait          bool  `json:"wait,omitempty"`
}

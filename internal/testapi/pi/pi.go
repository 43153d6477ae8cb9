// Package pi runs the real pi coding agent (@mariozechner/pi-coding-agent)
// against the scripted Anthropic API of package anthropic: where make
// real-engines installs it, how to point it at that API, and what keeps it
// to it. It is imported only by tests.
package pi

import (
	"encoding/json"
	"os"
	"os/exec"

	"hookbox.dev/hookbox/internal/testenv"
)

// PiEngine is the real pi CLI, where make real-engines installs it: a node
// script (#!/usr/bin/env node) that runs on the machine's node 20.
const PiEngine = "/opt/engines/node_modules/@mariozechner/pi-coding-agent/dist/cli.js"

// PiInstalled requires the real pi CLI at PiEngine and a node on PATH to
// run it.
var PiInstalled = testenv.Requirement{Name: "pi-coding-agent", Check: func() string {
	if _, err := os.Stat(PiEngine); err != nil {
		return "pi 0.73.1 not installed (make real-engines)"
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "no node on PATH for pi (apt-get install nodejs)"
	}
	return ""
}}

// PiModel is the built-in Anthropic model the tests run pi with.
const PiModel = "claude-sonnet-4-5"

// Args are the pi flags the tests run it with: the anthropic provider and
// PiModel, print mode with JSON event lines, and no session file.
var Args = []string{"--provider", "anthropic", "--model", PiModel, "-p", "--mode", "json", "--no-session"}

// QuietEnv is the environment that keeps pi to its model API: PI_OFFLINE
// turns off its startup network operations (the version check and install
// telemetry at pi.dev, package update checks).
var QuietEnv = []string{"PI_OFFLINE=1"}

// ModelsJSON is the models.json (in PI_CODING_AGENT_DIR, by default
// ~/.pi/agent) that sends the built-in anthropic provider to baseURL. pi
// 0.73.1 ignores ANTHROPIC_BASE_URL: each built-in model carries its own
// base URL, and a provider entry here overrides it for all of them.
func ModelsJSON(baseURL string) []byte {
	b, _ := json.Marshal(map[string]any{ // plain values
		"providers": map[string]any{"anthropic": map[string]string{"baseUrl": baseURL}},
	})
	return b
}

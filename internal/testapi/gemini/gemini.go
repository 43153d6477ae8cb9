package gemini

import (
	"os"
	"os/exec"

	"hookbox.dev/hookbox/internal/testenv"
)

// GeminiEngine is the real Gemini CLI, where make real-engines installs
// it: a node script (#!/usr/bin/env node) that runs on the machine's node
// 20.
const GeminiEngine = "/opt/engines/node_modules/@google/gemini-cli/bundle/gemini.js"

// GeminiInstalled requires the real Gemini CLI at GeminiEngine and a node
// on PATH to run it.
var GeminiInstalled = testenv.Requirement{Name: "gemini-cli", Check: func() string {
	if _, err := os.Stat(GeminiEngine); err != nil {
		return "Gemini CLI 0.61.0 not installed (make real-engines)"
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "no node on PATH for the Gemini CLI (apt-get install nodejs)"
	}
	return ""
}}

// GeminiModel is the model the tests name with --model. Naming one
// matters: without it Gemini CLI 0.61.0 routes each turn first, asking
// gemini-3.5-flash-lite (generateContent, a JSON complexity score) which
// model to use, and that side request would take a scripted turn.
const GeminiModel = "gemini-2.5-pro"

// QuietArgs are the gemini flags the tests run it with: the model (see
// GeminiModel), headless JSON output, the workspace trusted for this run
// and every tool call approved (the shell tool needs it).
var QuietArgs = []string{"--model", GeminiModel, "--output-format", "json", "--skip-trust", "--approval-mode", "yolo"}

// QuietSettings is the settings.json (in ~/.gemini) that points Gemini CLI
// 0.61.0 at a scripted API and keeps it there. GOOGLE_GEMINI_BASE_URL
// alone selects the "gateway" auth type, which headless mode rejects
// ("Invalid auth method selected."), so the API-key type is named; and
// without usageStatisticsEnabled false the CLI opens CONNECTs to
// play.googleapis.com (its usage log), which no variable turns off.
const QuietSettings = `{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "privacy": {"usageStatisticsEnabled": false}
}
`

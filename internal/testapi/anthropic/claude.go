package anthropic

import (
	"os"

	"hookbox.dev/hookbox/internal/testenv"
)

// ClaudeEngine is the real Claude Code CLI, where make real-engines
// installs it.
const ClaudeEngine = "/opt/engines/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

// ClaudeInstalled requires the real Claude Code CLI at ClaudeEngine.
var ClaudeInstalled = testenv.Requirement{Name: "claude-code", Check: func() string {
	if _, err := os.Stat(ClaudeEngine); err != nil {
		return "Claude Code 2.1.197 not installed (make real-engines)"
	}
	return ""
}}

// QuietEnv is the environment that keeps Claude Code to its model API. In
// 2.1.197 the first variable alone does it: without it the CLI opens six
// connections to api.anthropic.com:443 (three with DISABLE_TELEMETRY) and
// asks the model API for a session title before the first turn. The
// others are narrower switches, kept in case a release splits them out.
var QuietEnv = []string{
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	"DISABLE_TELEMETRY=1",
	"DISABLE_ERROR_REPORTING=1",
	"DISABLE_AUTOUPDATER=1",
}

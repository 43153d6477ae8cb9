package openai

import (
	"os"

	"hookbox.dev/hookbox/internal/testenv"
)

// CodexEngine is the real Codex CLI, where make real-engines installs it:
// the static musl binary the npm package's node launcher execs.
const CodexEngine = "/opt/engines/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// CodexInstalled requires the real Codex CLI at CodexEngine.
var CodexInstalled = testenv.Requirement{Name: "codex", Check: func() string {
	if _, err := os.Stat(CodexEngine); err != nil {
		return "Codex 0.171.0 not installed (make real-engines)"
	}
	return ""
}}

// CodexModel is the model the tests ask for: one of the models Codex
// 0.171.0 ships metadata for, so it offers its usual tools (apply_patch
// among them) and reports no "model metadata not found" error item.
const CodexModel = "gpt-5.5"

// ProviderArgs are the codex flags that point it at a Responses API at
// baseURL (http://host:port, the server adds /v1), as a custom model
// provider whose API key is read from OPENAI_API_KEY.
func ProviderArgs(baseURL string) []string {
	return []string{
		"-c", `model_providers.scripted.name="scripted"`,
		"-c", `model_providers.scripted.base_url="` + baseURL + `/v1"`,
		"-c", `model_providers.scripted.wire_api="responses"`,
		"-c", `model_providers.scripted.env_key="OPENAI_API_KEY"`,
		"-c", `model_provider="scripted"`,
		"-m", CodexModel,
	}
}

// QuietArgs are the codex flags that keep Codex 0.171.0 to its model API.
// Without them one exec opens CONNECTs to github.com (a git ls-remote of
// the curated plugins repository), api.github.com and chatgpt.com (the
// same sync's fallbacks), all from the plugins feature, and to
// ab.chatgpt.com (OTLP metrics), which analytics.enabled=false stops.
var QuietArgs = []string{"--disable", "plugins", "-c", "analytics.enabled=false"}

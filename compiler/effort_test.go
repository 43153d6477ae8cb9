package compiler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestCodexEffortClampTable: every level × every model family
// (docs/contracts.md §6).
func TestCodexEffortClampTable(t *testing.T) {
	// want[model][level] is the effort Codex receives.
	same := map[string]string{}
	for _, e := range efforts {
		same[e] = e
	}
	capAt := func(ceiling string) map[string]string {
		out := map[string]string{}
		for _, e := range efforts {
			out[e] = e
			if effortRank(e) > effortRank(ceiling) {
				out[e] = ceiling
			}
		}
		return out
	}
	models := map[string]map[string]string{
		"gpt-5.6-sol":        same,
		"gpt-5.6-terra":      same,
		"GPT-5.6-Sol":        same,
		"gpt-5.6-luna":       capAt("max"),
		"gpt-5.2":            capAt("xhigh"),
		"gpt-5.1-codex-max":  capAt("xhigh"),
		"o3":                 capAt("xhigh"),
		"gpt-5-codex":        capAt("xhigh"),
		"gpt-7-experimental": same, // unknown: passes through unclamped
		"":                   same, // no model: unknown
	}
	// The explicit expectations of the contract, spelled out.
	if models["gpt-5.6-luna"]["ultra"] != "max" || models["gpt-5.6-luna"]["max"] != "max" ||
		models["gpt-5.2"]["max"] != "xhigh" || models["gpt-5.2"]["ultra"] != "xhigh" || models["gpt-5.6-sol"]["ultra"] != "ultra" {
		t.Fatal("test table does not encode docs/contracts.md §6")
	}
	for model, want := range models {
		for _, level := range efforts {
			t.Run(fmt.Sprintf("%s/%s", model, level), func(t *testing.T) {
				engine := "{kind: codex, path: /opt/codex, effort: " + level + "}"
				if model != "" {
					engine = "{kind: codex, path: /opt/codex, model: " + model + ", effort: " + level + "}"
				}
				r := compileSpec(t, spawnYAML(engine, "  prompt: x"))
				wantArg := `model_reasoning_effort="` + want[level] + `"`
				if !slices.Contains(r.Process.Argv, wantArg) {
					t.Errorf("argv %q lacks %s", r.Process.Argv, wantArg)
				}
				if r.Engine.Effort != want[level] || r.Engine.RequestedEffort != level {
					t.Errorf("render effort %q (requested %q), want %q (%q)", r.Engine.Effort, r.Engine.RequestedEffort, want[level], level)
				}
				if clamped := want[level] != level; clamped != (len(r.Notes) > 0) {
					t.Errorf("a clamp must be noted in the render and only a clamp: notes %q", r.Notes)
				}
			})
		}
	}
}

func TestGeminiEffortTiers(t *testing.T) {
	tiers := map[string]string{"none": "low", "minimal": "low", "low": "low", "medium": "medium",
		"high": "high", "xhigh": "high", "max": "high", "ultra": "high"}
	for _, model := range []string{"gemini-3.1-pro", "gemini-3.1-pro-preview", "gemini-3-pro", "gemini-3-flash"} {
		for _, level := range efforts {
			r := compileSpec(t, spawnYAML("{kind: gemini, path: /opt/g, model: "+model+", effort: "+level+"}", "  prompt: x"))
			want := tiers[level]
			if want == "medium" && strings.HasPrefix(model, "gemini-3.1-pro") {
				want = "high" // Gemini 3.1 Pro has no Medium tier
			}
			if got := r.Engine.Model; got != model+"-"+want {
				t.Errorf("%s at %s: model %q, want %q", model, level, got, model+"-"+want)
			}
			if i := slices.Index(r.Process.Argv, "-m"); i < 0 || r.Process.Argv[i+1] != model+"-"+want {
				t.Errorf("%s at %s: argv %q", model, level, r.Process.Argv)
			}
			for _, arg := range r.Process.Argv {
				if strings.Contains(arg, "effort") {
					t.Errorf("gemini has no effort flag, got %q", arg)
				}
			}
		}
	}
	// A fully qualified model wins over effort.
	r := compileSpec(t, spawnYAML("{kind: gemini, path: /opt/g, model: gemini-3-pro-low, effort: ultra}", "  prompt: x"))
	if r.Engine.Model != "gemini-3-pro-low" || len(r.Notes) == 0 {
		t.Errorf("qualified model must win and be noted: model %q notes %q", r.Engine.Model, r.Notes)
	}
	// Effort without a model cannot become a suffix: a clear error.
	if _, err := tryCompile(spawnYAML("{kind: gemini, path: /opt/g, effort: high}", "  prompt: x")); err == nil ||
		!strings.Contains(err.Error(), "spec.engine.effort") {
		t.Errorf("gemini effort without model must be refused at spec.engine.effort, got %v", err)
	}
}

func TestClaudeAndPiEffortMapping(t *testing.T) {
	claude := map[string]string{"none": "low", "minimal": "low", "low": "low", "medium": "medium",
		"high": "high", "xhigh": "xhigh", "max": "max", "ultra": "max"}
	pi := map[string]string{"none": "off", "minimal": "minimal", "low": "low", "medium": "medium",
		"high": "high", "xhigh": "xhigh", "max": "xhigh", "ultra": "xhigh"}
	for _, level := range efforts {
		r := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c, effort: "+strings.ToUpper(level)+"}", "  prompt: x"))
		if i := slices.Index(r.Process.Argv, "--effort"); i < 0 || r.Process.Argv[i+1] != claude[level] {
			t.Errorf("claude %s: argv %q, want --effort %s", level, r.Process.Argv, claude[level])
		}
		r = compileSpec(t, spawnYAML("{kind: pi, path: /opt/pi, effort: "+level+"}", "  prompt: x"))
		if i := slices.Index(r.Process.Argv, "--thinking"); i < 0 || r.Process.Argv[i+1] != pi[level] {
			t.Errorf("pi %s: argv %q, want --thinking %s", level, r.Process.Argv, pi[level])
		}
	}
}

func TestEffortNormalizedAtParse(t *testing.T) {
	parsed, err := Parse([]byte(spawnYAML("{kind: claude, path: /opt/c, effort: ' XHigh '}", "  prompt: x")), "t.yaml", "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := parsed[0].Spawn.Spec.Engine.Effort; got != "xhigh" {
		t.Errorf("effort normalized to %q, want xhigh", got)
	}
}

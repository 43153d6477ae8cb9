package compiler

import (
	"slices"
	"strings"
)

// effortRank orders the effort vocabulary.
func effortRank(e string) int { return slices.Index(efforts, e) }

// clampTo lowers effort to ceiling when it is above it.
func clampTo(effort, ceiling string) string {
	if effortRank(effort) > effortRank(ceiling) {
		return ceiling
	}
	return effort
}

// codexEarlierModels are the Codex models released before the gpt-5.6
// family; their effort ceiling is xhigh (docs/contracts.md §6).
var codexEarlierModels = []string{
	"codex-mini-latest",
	"gpt-5", "gpt-5-codex", "gpt-5-codex-mini", "gpt-5-mini", "gpt-5-nano",
	"gpt-5.1", "gpt-5.1-codex", "gpt-5.1-codex-max", "gpt-5.1-codex-mini",
	"gpt-5.2", "gpt-5.2-codex",
	"gpt-5.3", "gpt-5.3-codex", "gpt-5.3-codex-spark",
	"gpt-5.4", "gpt-5.4-mini", "gpt-5.4-codex",
	"gpt-5.5", "gpt-5.5-codex",
	"o3", "o3-pro", "o4-mini",
}

// codexEffort clamps effort for a Codex model. Unknown models pass through
// unclamped: hookbox does not guess the ceiling of a model it does not know.
func codexEffort(model, effort string) (string, bool) {
	if effort == "" {
		return "", false
	}
	var ceiling string
	switch m := strings.ToLower(model); {
	case m == "gpt-5.6-sol", m == "gpt-5.6-terra":
		ceiling = "ultra"
	case m == "gpt-5.6-luna":
		ceiling = "max"
	case slices.Contains(codexEarlierModels, m):
		ceiling = "xhigh"
	default:
		return effort, false
	}
	clamped := clampTo(effort, ceiling)
	return clamped, clamped != effort
}

// claudeEffort maps the vocabulary onto Claude Code's levels: below low
// becomes low, above max becomes max.
func claudeEffort(effort string) string {
	switch {
	case effort == "":
		return ""
	case effortRank(effort) < effortRank("low"):
		return "low"
	case effortRank(effort) > effortRank("max"):
		return "max"
	}
	return effort
}

// geminiTiers are the model-name suffixes of the Antigravity CLI.
var geminiTiers = []string{"low", "medium", "high"}

// geminiModel returns the model name carrying the effort tier. A model that
// already names a tier is fully qualified and wins over effort. Gemini 3.1
// Pro has no Medium tier; medium there becomes high (never less effort than
// asked where a tier is missing).
func geminiModel(model, effort string) (name, tier string, qualified bool) {
	lower := strings.ToLower(model)
	for _, t := range geminiTiers {
		if strings.HasSuffix(lower, "-"+t) {
			return model, "", true
		}
	}
	if effort == "" || model == "" {
		return model, "", false
	}
	switch {
	case effortRank(effort) <= effortRank("low"):
		tier = "low"
	case effort == "medium":
		tier = "medium"
		if strings.HasPrefix(lower, "gemini-3.1-pro") {
			tier = "high"
		}
	default:
		tier = "high"
	}
	return model + "-" + tier, tier, false
}

// piThinking maps the vocabulary onto pi's --thinking levels.
func piThinking(effort string) string {
	switch effort {
	case "":
		return ""
	case "none":
		return "off"
	case "max", "ultra":
		return "xhigh"
	}
	return effort
}

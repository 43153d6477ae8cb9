package compiler

import (
	"encoding/json"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

func TestProbeStepReachesTheScript(t *testing.T) {
	r := compileSpec(t, spawnYAML(`{kind: scripted, path: /opt/scripted, script: [{probe: {paths: [/run/hookbox, /tmp], dial: ["10.0.0.1:80"]}}]}`))
	var script render.Script
	for _, f := range r.Files {
		if f.Path == render.ScriptPath {
			if err := json.Unmarshal([]byte(f.Content), &script); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(script.Steps) != 1 || script.Steps[0].Probe == nil {
		t.Fatalf("script %+v has no probe step", script)
	}
	p := script.Steps[0].Probe
	if strings.Join(p.Paths, " ") != "/run/hookbox /tmp" || strings.Join(p.Dial, " ") != "10.0.0.1:80" {
		t.Errorf("probe step %+v", p)
	}
}

func TestProbeStepRefusesRelativePaths(t *testing.T) {
	_, err := tryCompile(spawnYAML(`{kind: scripted, path: /opt/scripted, script: [{probe: {paths: [run/hookbox]}}]}`))
	if err == nil || !strings.Contains(err.Error(), "probe.paths[0]") {
		t.Errorf("a relative probe path: %v, want an error naming probe.paths[0]", err)
	}
}

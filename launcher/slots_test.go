package launcher

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

// hostileRunID is no id NewRunID makes: it would break a JSON document or
// a shell command if the launcher pasted it in as text.
const hostileRunID = `hbx-"},{"command":"/bin/sh"} '$(touch /tmp/pwned)'` + "\n`id` \\"

// TestConfigFilesGetSlotValues: the files the engine reads hold the run's
// values, each one JSON string and one shell word, whatever it contains.
func TestConfigFilesGetSlotValues(t *testing.T) {
	files := []render.File{
		{Path: render.ConfigDir + "/settings.json", Mode: 0o644,
			Content: `{"hooks":{"Stop":[{"hooks":[{"args":["{run_id}","{run_dir}"],"command":"/opt/h"}]}]}}`,
			Slots:   []render.FileSlot{{Pointer: "/hooks/Stop/0/hooks/0/args/0"}, {Pointer: "/hooks/Stop/0/hooks/0/args/1"}}},
		{Path: render.ConfigDir + "/hooks.json", Mode: 0o644,
			Content: `{"command":"/opt/h '{run_id}' x"}`,
			Slots:   []render.FileSlot{{Pointer: "/command", Shell: true}}},
	}
	filled, err := render.FillFiles(files, render.LaunchValues(hostileRunID))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeConfigFiles(dir, filled, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	var settings struct {
		Hooks map[string][]struct {
			Hooks []struct{ Args []string }
		}
	}
	readJSONFile(t, filepath.Join(dir, "settings.json"), &settings)
	if got := settings.Hooks["Stop"][0].Hooks[0].Args; !slices.Equal(got, []string{hostileRunID, render.RunDir}) {
		t.Errorf("exec-form args = %q", got)
	}
	var hooks struct{ Command string }
	readJSONFile(t, filepath.Join(dir, "hooks.json"), &hooks)
	if words, err := shellwords.Split(hooks.Command); err != nil || !slices.Equal(words, []string{"/opt/h", hostileRunID, "x"}) {
		t.Errorf("command %q splits to %q (%v)", hooks.Command, words, err)
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
}

// TestReverifyUsesRecordedSlots: hookbox verify judges a hook's slot with
// the values result.json recorded, and a record without them is never
// confirmed.
func TestReverifyUsesRecordedSlots(t *testing.T) {
	const runID = "hbx-1-00000000"
	r := render.Render{
		SchemaVersion: render.SchemaVersion,
		Engine:        render.Engine{Kind: "scripted", Exec: render.Exec{Path: "/opt/engine", Argv: []string{"/opt/engine"}}},
		Programs:      []render.Program{{Path: "/opt/engine", Roles: []string{render.RoleEngine}}, {Path: "/opt/hook", Roles: []string{render.RoleHook}}},
		Hooks: []render.Hook{{Name: "h", Event: "Stop", Required: true, Argv: []string{"/opt/hook", "{run_id}"},
			Chain: []render.Exec{{Path: "/opt/hook", Argv: []string{"/opt/hook", "{run_id}"}, Slots: []int{1}}}}},
		Trace: render.TracePolicy{Mode: render.TraceVerify, Allow: []string{}},
	}
	record := func(t *testing.T, hookArg string, slots render.SlotValues) string {
		dir := t.TempDir()
		canonical, err := r.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		write := func(name string, data []byte) {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(RenderFile, canonical)
		res, _ := json.Marshal(Result{SchemaVersion: ResultSchemaVersion, RunID: runID, Slots: slots})
		write(ResultFile, res)
		ids, _ := json.Marshal(verify.FileIdentities{"/opt/engine": {Dev: 1, Ino: 2}, "/opt/hook": {Dev: 1, Ino: 3}})
		write(IdentitiesFile, ids)
		var trace strings.Builder
		for _, e := range []ebpf.Event{
			{Kind: ebpf.KindExec, TGID: 1, Time: 1, Filename: "/opt/engine", Argv: [][]byte{[]byte("/opt/engine")}, Dev: 1, Ino: 2},
			{Kind: ebpf.KindExec, TGID: 2, PPID: 1, Time: 2, Filename: "/opt/hook", Argv: [][]byte{[]byte("/opt/hook"), []byte(hookArg)}, Dev: 1, Ino: 3},
		} {
			line, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			trace.Write(append(line, '\n'))
		}
		trace.WriteString(`{"kind":"stats","stats":{"matched":2,"delivered":2}}` + "\n")
		write(TraceFile, []byte(trace.String()))
		return dir
	}
	for name, tc := range map[string]struct {
		hookArg string
		slots   render.SlotValues
		status  verify.Status
		reason  string
	}{
		"the recorded run id":        {runID, render.LaunchValues(runID), verify.StatusConfirmed, ""},
		"another value":              {"ATTACKER CHOSEN VALUE", render.LaunchValues(runID), verify.StatusMismatch, verify.ReasonHookArgvDiffers},
		"the placeholder as written": {"{run_id}", render.LaunchValues(runID), verify.StatusMismatch, verify.ReasonHookArgvDiffers},
		"a record without slots":     {runID, nil, verify.StatusUnchecked, verify.ReasonSlotValuesUnknown},
	} {
		t.Run(name, func(t *testing.T) {
			v, err := Reverify(record(t, tc.hookArg, tc.slots))
			if err != nil {
				t.Fatal(err)
			}
			if v.Status != tc.status || tc.reason != "" && !slices.Contains(v.Reasons, tc.reason) {
				t.Errorf("verdict %s %q, want %s with %q", v.Status, v.Reasons, tc.status, tc.reason)
			}
		})
	}
}

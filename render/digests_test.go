package render

import (
	"strings"
	"testing"
)

func TestPlanString(t *testing.T) {
	cases := []struct{ name, in, base, want string }{
		{"the base itself", "/src/repo", "/src/repo", BaseToken},
		{"beneath it", "/src/repo/hooks/a.sh", "/src/repo", BaseToken + "/hooks/a.sh"},
		{"a container path derived from it", HostDir + "/src/repo/bin/e", "/src/repo", HostDir + BaseToken + "/bin/e"},
		{"inside a command", "'/src/repo/hooks/a.sh' --x '/src/repo/b'", "/src/repo", "'" + BaseToken + "/hooks/a.sh' --x '" + BaseToken + "/b'"},
		{"a longer name", "/src/repo2/x", "/src/repo", "/src/repo2/x"},
		{"a longer name, then the base", "/src/repo2:/src/repo/x", "/src/repo", "/src/repo2:" + BaseToken + "/x"},
		{"elsewhere", "/usr/bin/git", "/src/repo", "/usr/bin/git"},
		{"percent escaped", "%s\n", "/src/repo", "%25s\n"},
		{"a literal token is escaped", BaseToken + "/x", "/src/repo", "%25{base}/x"},
		{"a base with a percent", "/src/100%/x", "/src/100%", BaseToken + "/x"},
		{"no base: escaping only", "/src/repo/%", "", "/src/repo/%25"},
		{"the root: escaping only", "/src/repo/%", "/", "/src/repo/%25"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanString(tc.in, tc.base); got != tc.want {
				t.Errorf("PlanString(%q, %q) = %q, want %q", tc.in, tc.base, got, tc.want)
			}
		})
	}
}

// undoPlanString inverts PlanString: the plan form loses nothing but the
// base's location.
func undoPlanString(s, base string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
			i += 3
		case strings.HasPrefix(s[i:], BaseToken):
			b.WriteString(base)
			i += len(BaseToken)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

func FuzzPlanStringReversible(f *testing.F) {
	f.Add("/src/repo/x '/src/repo'", "/src/repo")
	f.Add("%{base}/x%25", "/a%")
	f.Add("/a/a/a/", "/a/a")
	f.Fuzz(func(t *testing.T, s, base string) {
		if !strings.HasPrefix(base, "/") || base == "/" {
			return
		}
		if got := undoPlanString(PlanString(s, base), base); got != s {
			t.Fatalf("PlanString(%q, %q) = %q does not undo: %q", s, base, PlanString(s, base), got)
		}
	})
}

// checkout is sampleRender as compiled from a checkout at base: hook, engine
// and workspace under it, and a program under a mounted-over directory.
func checkout(base string) *Render {
	r := sampleRender()
	r.BaseDir = base
	engine := base + "/bin/engine"
	r.Engine.Exec = Exec{Path: engine, Argv: []string{engine, "--settings", ConfigDir + "/s.json"}}
	r.Process.Argv = append([]string{InitPath}, r.Engine.Exec.Argv...)
	r.Programs = []Program{
		{Path: engine, HostPath: engine, Roles: []string{RoleEngine}},
		{Path: "/usr/bin/printf", HostPath: "/usr/bin/printf", Roles: []string{RoleHook}},
		{Path: ContainerPath("/tmp/tool"), HostPath: "/tmp/tool", Roles: []string{RoleTool}},
	}
	r.Files = []File{{Path: ConfigDir + "/s.json", Mode: 0o444, Content: `{"hook":"'` + base + `/hooks/a.sh' %s"}`}}
	r.Hooks = []Hook{{Name: "a", Event: "Stop", Argv: []string{base + "/hooks/a.sh"}, Chain: []Exec{{Path: base + "/hooks/a.sh", Argv: []string{base + "/hooks/a.sh"}}}}}
	r.Mounts = append(r.Mounts, Mount{Destination: WorkspaceDir, Kind: MountBind, Source: base + "/workspace", ReadOnly: true})
	r.Limits.MemoryBytes = 1<<62 + 1 // beyond float64's exact integers
	r.Runfiles = []Runfile{{Path: engine, Type: RunfileFile, Mode: 0o755, Size: 3, SHA256: strings.Repeat("a", 64)}}
	r.SortLists()
	return r
}

func planDigestOf(t *testing.T, r *Render) string {
	t.Helper()
	d, _, err := r.PlanDigest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPlanDigestIgnoresTheCheckoutsLocation(t *testing.T) {
	// "/work/zz" sorts its engine after /usr/bin/printf, "/src/aa" before.
	a, b := checkout("/src/aa"), checkout("/work/zz/deeper")
	if a.Programs[1].HostPath == "/usr/bin/printf" || b.Programs[1].HostPath != "/usr/bin/printf" {
		t.Fatal("test bug: the two checkouts should sort their programs differently")
	}
	if planDigestOf(t, a) != planDigestOf(t, b) {
		_, fa, _ := a.PlanDigest()
		_, fb, _ := b.PlanDigest()
		t.Errorf("the same plan in two checkouts has two plan digests:\n%s\n%s", fa, fb)
	}
	ca, _, _ := a.Digest()
	cb, _, _ := b.Digest()
	if ca == cb {
		t.Error("the content digests should name the exact bytes, host paths included")
	}
	_, form, _ := a.PlanDigest()
	for _, absent := range []string{"/src/aa", `"runfiles"`, `"base_dir"`} {
		if strings.Contains(string(form), absent) {
			t.Errorf("the plan form holds %s:\n%s", absent, form)
		}
	}
	if !strings.Contains(string(form), `"memory_bytes":4611686018427387905`) {
		t.Errorf("the plan form changed a large integer:\n%s", form)
	}
}

func TestPlanDigestChangesWithThePlan(t *testing.T) {
	base := planDigestOf(t, checkout("/src/aa"))
	cases := []struct {
		name   string
		change func(r *Render)
	}{
		{"a hook argument", func(r *Render) { r.Hooks[0].Argv = append(r.Hooks[0].Argv, "-v") }},
		{"a path outside the base", func(r *Render) { r.Programs[2].HostPath = "/tmp/tool2" }},
		{"a path under the base", func(r *Render) { r.Mounts[len(r.Mounts)-1].Source = "/src/aa/ws" }},
		{"the base's path written as the token", func(r *Render) { r.Mounts[len(r.Mounts)-1].Source = BaseToken + "/workspace" }},
		{"a file's content", func(r *Render) { r.Files[0].Content += " " }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := checkout("/src/aa")
			tc.change(r)
			if planDigestOf(t, r) == base {
				t.Errorf("changing %s kept the plan digest", tc.name)
			}
		})
	}
	// What the plan digest leaves out.
	r := checkout("/src/aa")
	r.Runfiles[0].SHA256 = strings.Repeat("b", 64)
	if planDigestOf(t, r) != base {
		t.Error("the runfiles manifest changed the plan digest")
	}
}

func TestDigests(t *testing.T) {
	r := checkout("/src/aa")
	d, err := r.Digests()
	if err != nil {
		t.Fatal(err)
	}
	content, _, _ := r.Digest()
	if d.Plan != planDigestOf(t, r) || d.Content != content || d.Plan == d.Content {
		t.Errorf("Digests %+v: want plan %s, content %s", d, planDigestOf(t, r), content)
	}
	if !d.Matches(d.Plan) || !d.Matches(d.Content) || d.Matches("sha256:"+strings.Repeat("0", 64)) {
		t.Errorf("Matches: %+v", d)
	}
	r.Runfiles = nil
	if d, _ := r.Digests(); d.Content != "" || d.Matches("") {
		t.Errorf("without runfiles there is no content digest: %+v", d)
	}
	for s, want := range map[string]bool{d.Plan: true, "sha256:" + strings.Repeat("A", 64): false, "sha256:abc": false, strings.Repeat("a", 64): false,
		"sha256:" + strings.Repeat("a", 65): false, "sha256:" + strings.Repeat("g", 64): false, "sha512:" + strings.Repeat("a", 64): false, " " + d.Plan: false} {
		if ValidDigest(s) != want {
			t.Errorf("ValidDigest(%q) = %v", s, !want)
		}
	}
}

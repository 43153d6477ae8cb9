package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func sampleRender() *Render {
	return &Render{
		SchemaVersion: SchemaVersion,
		Spawn:         "s",
		Engine:        Engine{Kind: "exec", Exec: Exec{Path: "/bin/x", Argv: []string{"/bin/x", "a b"}}},
		Process: Process{Argv: []string{"/bin/x", "a b"}, Cwd: WorkspaceDir, Stdin: "/dev/null", Env: []EnvVar{
			{Name: "HOME", Source: EnvHookbox, Value: HomeDir},
			{Name: "TOKEN", Source: EnvSecret},
			{Name: "LANG", Source: EnvHost},
		}},
		Programs: []Program{{Path: "/bin/x", HostPath: "/bin/x", Roles: []string{RoleEngine}}},
		Mounts:   []Mount{{Destination: RunDir, Kind: MountTmpfs, SizeBytes: 1 << 20, Options: []string{"noexec"}}},
		Limits:   Limits{TimeoutMS: 90000, MemoryBytes: 3 << 30, Pids: 10, TmpfsBytes: 1 << 20},
		Network:  "none",
		Trace:    TracePolicy{Mode: TraceVerify, Allow: []string{}},
	}
}

func TestDigestIsSha256OfCanonicalBytes(t *testing.T) {
	r := sampleRender()
	digest, canonical, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canonical)
	if digest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("digest %s is not the sha256 of the canonical bytes", digest)
	}
	again, err := r.Canonical()
	if err != nil || string(again) != string(canonical) {
		t.Errorf("Canonical and Digest disagree")
	}
	if !strings.HasPrefix(string(canonical), `{"engine":`) || strings.Contains(string(canonical), " \n") {
		t.Errorf("canonical JSON must have sorted keys and no insignificant whitespace: %s", canonical)
	}
}

func TestTextView(t *testing.T) {
	text := sampleRender().Text(Digests{Plan: "sha256:abc", Content: "sha256:def"})
	for _, want := range []string{
		"spawn s", "plan digest     sha256:abc", "content digest  sha256:def", "exec     /bin/x 'a b'", "TOKEN  <secret, resolved at launch>",
		"LANG  <copied from the host at launch>", "HOME=/run/hookbox/home", "timeout 90s", "memory 3Gi", "tmpfs 1Mi",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text view lacks %q:\n%s", want, text)
		}
	}
}

func TestProgramAndPackagePaths(t *testing.T) {
	r := &Render{Programs: []Program{
		{Path: "/usr/bin/node", HostPath: "/usr/bin/node", Roles: []string{RoleTool}},
		{Path: "/opt/pkg", HostPath: "/opt/pkg", Roles: []string{RolePackage, RoleTool}},
		{Path: "/x/cli.js", HostPath: "/host/cli.js", Roles: []string{RoleEngine}},
	}}
	if got := r.ProgramPaths(); strings.Join(got, " ") != "/usr/bin/node /host/cli.js" {
		t.Errorf("ProgramPaths %q: a package tree is not a plain program", got)
	}
	if got := r.PackagePaths(); strings.Join(got, " ") != "/opt/pkg" {
		t.Errorf("PackagePaths %q", got)
	}
}

package k8s

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/render"
)

// kubeletExpand is the kubelet's $(VAR) expansion of command, args and env
// values (k8s.io/kubernetes third_party/forked/golang/expansion): "$$" is
// "$", "$(NAME)" is NAME's value when defined and stays as written
// otherwise; any other '$' stays. The k8svalidate module checks the same
// property with the kubelet's own code.
func kubeletExpand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// expandedArgv is the argv the engine process gets from the Job.
func expandedArgv(c corev1.Container) []string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = kubeletExpand(e.Value, env)
		} else {
			env[e.Name] = "<from " + e.Name + ">"
		}
	}
	var argv []string
	for _, s := range slices.Concat(c.Command, c.Args) {
		argv = append(argv, kubeletExpand(s, env))
	}
	return argv
}

func engineContainer(t *testing.T, job *batchv1.Job) corev1.Container {
	t.Helper()
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == EngineContainer {
			return c
		}
	}
	t.Fatalf("job %s has no %s container", job.Name, EngineContainer)
	return corev1.Container{}
}

// TestEveryExampleDecodesStrictlyWithTheRendersArgv: every document of
// every example decodes strictly, and each Job's command+args, after the
// kubelet's expansion, are exactly its render's process argv (the init,
// then the engine's argv); its
// annotation names that render's digest.
func TestEveryExampleDecodesStrictlyWithTheRendersArgv(t *testing.T) {
	for _, tc := range goldenCases {
		renders := compileExample(t, tc.example, tc.params)
		data, err := YAML(renders, goldenOptions())
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeAll(t, data)
		if len(objs) != 3*len(renders) {
			t.Fatalf("%s: %d documents for %d renders", tc.example, len(objs), len(renders))
		}
		for i, r := range renders {
			cm, ok1 := objs[3*i].(*corev1.ConfigMap)
			np, ok2 := objs[3*i+1].(*networkingv1.NetworkPolicy)
			job, ok3 := objs[3*i+2].(*batchv1.Job)
			if !ok1 || !ok2 || !ok3 {
				t.Fatalf("%s: documents of spawn %d are %T, %T, %T", tc.example, i, objs[3*i], objs[3*i+1], objs[3*i+2])
			}
			digest, canonical, err := r.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if got := expandedArgv(engineContainer(t, job)); !slices.Equal(got, r.Process.Argv) || got[0] != render.InitPath || !slices.Equal(got[1:], r.Engine.Exec.Argv) {
				t.Errorf("%s/%s: argv\n got %q\nwant %q", tc.example, r.Spawn, got, r.Process.Argv)
			}
			hex := strings.TrimPrefix(digest, "sha256:")
			plan, _, err := r.PlanDigest()
			if err != nil {
				t.Fatal(err)
			}
			for what, ann := range map[string]map[string]string{"job": job.Annotations, "pod": job.Spec.Template.Annotations, "configmap": cm.Annotations} {
				if ann[AnnotationRenderSHA256] != hex {
					t.Errorf("%s/%s: %s annotation %s = %q, want %s", tc.example, r.Spawn, what, AnnotationRenderSHA256, ann[AnnotationRenderSHA256], hex)
				}
				if want := strings.TrimPrefix(plan, "sha256:"); ann[AnnotationPlanSHA256] != want {
					t.Errorf("%s/%s: %s annotation %s = %q, want %s", tc.example, r.Spawn, what, AnnotationPlanSHA256, ann[AnnotationPlanSHA256], want)
				}
			}
			if cm.Data[RenderKey] != string(canonical) {
				t.Errorf("%s/%s: the ConfigMap does not hold the render's canonical bytes", tc.example, r.Spawn)
			}
			if job.Spec.Template.Labels[LabelSpawn] != r.Spawn || np.Spec.PodSelector.MatchLabels[LabelRender] != job.Spec.Template.Labels[LabelRender] {
				t.Errorf("%s/%s: labels do not tie the pod, the spawn and the policy together", tc.example, r.Spawn)
			}
		}
	}
}

// TestSecretSentinelNeverInYAML plants a sentinel under every name the
// examples forward; the YAML references the secrets and never holds a
// value.
func TestSecretSentinelNeverInYAML(t *testing.T) {
	const sentinel = "hbx-sentinel-k8s-5d0e2a"
	secrets := []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"}
	for _, name := range append(slices.Clone(secrets), "LANG") {
		t.Setenv(name, sentinel)
	}
	for _, tc := range goldenCases {
		renders := compileExample(t, tc.example, tc.params)
		data, err := YAML(renders, goldenOptions())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), sentinel) {
			t.Fatalf("%s: the YAML holds the secret sentinel", tc.example)
		}
		for _, obj := range decodeAll(t, data) {
			job, ok := obj.(*batchv1.Job)
			if !ok {
				continue
			}
			for _, e := range engineContainer(t, job).Env {
				switch {
				case slices.Contains(secrets, e.Name):
					ref := e.ValueFrom
					if e.Value != "" || ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != DefaultSecretName || ref.SecretKeyRef.Key != e.Name ||
						(ref.SecretKeyRef.Optional != nil && *ref.SecretKeyRef.Optional) {
						t.Errorf("%s: secret %s is not a required secretKeyRef: %+v", job.Name, e.Name, e)
					}
				case e.Name == "LANG":
					ref := e.ValueFrom
					if e.Value != "" || ref == nil || ref.ConfigMapKeyRef == nil || ref.ConfigMapKeyRef.Name != DefaultHostEnvConfigMap ||
						ref.ConfigMapKeyRef.Optional == nil || !*ref.ConfigMapKeyRef.Optional {
						t.Errorf("%s: host variable LANG is not an optional configMapKeyRef: %+v", job.Name, e)
					}
				}
			}
		}
	}
}

func TestEscapeSurvivesKubeletExpansion(t *testing.T) {
	env := map[string]string{"HOME": "/home/x", "A": "1"}
	for _, s := range []string{"plain", "$(HOME)", "$$", "$", "a$", "$(A", "$(UNSET)", "x$(A)y$$z$", "$$(HOME)", "cost: $5"} {
		if got := kubeletExpand(escape(s), env); got != s {
			t.Errorf("escape(%q) expands to %q", s, got)
		}
	}
	// The mirror of the kubelet's expansion does expand, so the check above
	// means something.
	if kubeletExpand("$(HOME)$$", env) != "/home/x$" {
		t.Error("kubeletExpand does not expand")
	}
}

// testRender is a small valid render with one secret and one host variable.
func testRender() *render.Render {
	r := &render.Render{
		SchemaVersion: render.SchemaVersion,
		Spawn:         "t",
		Engine:        render.Engine{Kind: "exec", Exec: render.Exec{Path: "/usr/bin/tool", Argv: []string{"/usr/bin/tool", "$(HOME)"}}},
		Process: render.Process{
			Argv: []string{"/usr/bin/tool", "$(HOME)"}, Cwd: render.WorkspaceDir, Stdin: "/dev/null", UID: 65532, GID: 65532,
			Env: []render.EnvVar{{Name: "HOME", Source: render.EnvHookbox, Value: render.HomeDir}, {Name: "TOKEN", Source: render.EnvSecret}},
		},
		Programs: []render.Program{{Path: "/usr/bin/tool", HostPath: "/usr/bin/tool", Roles: []string{render.RoleEngine}}},
		Mounts: []render.Mount{
			{Destination: render.RunDir, Kind: render.MountTmpfs, SizeBytes: 1 << 20},
			{Destination: render.TmpDir, Kind: render.MountTmpfs, SizeBytes: 1 << 20},
			{Destination: render.WorkspaceDir, Kind: render.MountBind, Source: "/src", ReadOnly: true},
		},
		Limits:  render.Limits{TimeoutMS: 1500, MemoryBytes: 1 << 30, MilliCPUs: 500, TmpfsBytes: 1 << 20},
		Network: "none",
		Trace:   render.TracePolicy{Mode: render.TraceVerify, Allow: []string{}},
	}
	r.SortLists()
	return r
}

func TestBuildLimitsAndIdentity(t *testing.T) {
	o, err := Build(testRender(), goldenOptions())
	if err != nil {
		t.Fatal(err)
	}
	spec := o.Job.Spec
	if *spec.BackoffLimit != 0 || *spec.ActiveDeadlineSeconds != 2 || *spec.TTLSecondsAfterFinished != DefaultTTLSeconds {
		t.Errorf("backoff %d, deadline %d, ttl %d", *spec.BackoffLimit, *spec.ActiveDeadlineSeconds, *spec.TTLSecondsAfterFinished)
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || *pod.AutomountServiceAccountToken || *pod.EnableServiceLinks {
		t.Errorf("pod: restart %s, token %v, service links %v", pod.RestartPolicy, *pod.AutomountServiceAccountToken, *pod.EnableServiceLinks)
	}
	c := pod.Containers[0]
	res := c.Resources
	if res.Limits.Memory().Value() != 1<<30 || res.Requests.Memory().Value() != 1<<30 || res.Limits.Cpu().MilliValue() != 500 || res.Requests.Cpu().MilliValue() != 500 {
		t.Errorf("resources %v", res)
	}
	for _, sc := range append([]*corev1.SecurityContext{c.SecurityContext}, pod.InitContainers[0].SecurityContext) {
		if !*sc.RunAsNonRoot || *sc.RunAsUser != 65532 || *sc.RunAsGroup != 65532 || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("security context %+v", sc)
		}
	}
	if c.Args[0] != "$$(HOME)" {
		t.Errorf("args are not protected from expansion: %q", c.Args)
	}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil && (v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.Value() != 1<<20) {
			t.Errorf("volume %s: %+v", v.Name, v.EmptyDir)
		}
	}
	if len(o.Job.Name) > 63 || !strings.HasPrefix(o.Job.Name, "t-") {
		t.Errorf("name %q", o.Job.Name)
	}
}

// TestInodeAndOutputLimitsAreNotReproduced: an emptyDir has no inode limit
// and the kubelet has no output cap, so the Job says so.
func TestInodeAndOutputLimitsAreNotReproduced(t *testing.T) {
	r := testRender()
	r.Limits.TmpfsInodes, r.Limits.OutputBytes = 4096, 1<<20
	o, err := Build(r, goldenOptions())
	if err != nil {
		t.Fatal(err)
	}
	note := o.Job.Annotations[AnnotationNotReproduced]
	for _, want := range []string{"inode limit 4096 on /run/hookbox and /tmp", "output cap 1048576 bytes per stream"} {
		if !strings.Contains(note, want) {
			t.Errorf("not-reproduced %q lacks %q", note, want)
		}
	}
}

func TestBuildRefusals(t *testing.T) {
	cases := []struct {
		name   string
		change func(*render.Render, *Options)
		want   error
		text   string
	}{
		{"image by tag", func(_ *render.Render, o *Options) { o.Image = "busybox:latest" }, ErrOptions, "--image"},
		{"no runfiles image", func(_ *render.Render, o *Options) { o.RunfilesImage = "" }, ErrOptions, "--runfiles-image"},
		{"bad secret name", func(_ *render.Render, o *Options) { o.SecretName = "Not_A_Name" }, ErrOptions, "--secret-name"},
		{"negative ttl", func(_ *render.Render, o *Options) { o.TTLSecondsAfterFinished = ptr(int32(-1)) }, ErrOptions, "negative"},
		{"grant", func(r *render.Render, _ *Options) {
			r.Mounts = append(r.Mounts, render.Mount{Destination: "/grants/docs", Kind: render.MountBind, Source: "/docs", ReadOnly: true})
		}, ErrUnsupported, "addDirs"},
		{"network", func(r *render.Render, _ *Options) { r.Network = "host" }, ErrUnsupported, "network"},
		{"overlay workspace", func(r *render.Render, _ *Options) {
			for i, m := range r.Mounts {
				if m.Destination == render.WorkspaceDir {
					r.Mounts[i] = render.Mount{Destination: m.Destination, Kind: render.MountOverlay, Source: m.Source}
				}
			}
		}, ErrUnsupported, "workspace mode overlay"},
		{"egress allowlist without a proxy image", func(r *render.Render, _ *Options) {
			r.Network = render.NetworkAllowlist
			r.Egress = render.NewEgress([]render.Destination{{Host: "api.anthropic.com", Port: 443, Kind: render.DestName, Source: render.SourceModelAPI}})
		}, ErrOptions, "give --proxy-image"},
		{"proxy image by tag", func(_ *render.Render, o *Options) { o.ProxyImage = "hookbox:latest" }, ErrOptions, "--proxy-image"},
		{"allowlist without destinations", func(r *render.Render, o *Options) {
			r.Network, r.Egress, o.ProxyImage = render.NetworkAllowlist, nil, goldenProxyImage
		}, ErrUnsupported, "lists no destinations"},
		{"file outside config and run dir", func(r *render.Render, _ *Options) {
			r.Files = []render.File{{Path: "/etc/x", Mode: 0o644}}
		}, ErrUnsupported, "neither"},
		{"too large", func(r *render.Render, _ *Options) {
			r.Files = []render.File{{Path: render.ConfigDir + "/big", Mode: 0o644, Content: strings.Repeat("x", 1<<20)}}
		}, ErrUnsupported, "ConfigMap holds"},
		{"program in /", func(r *render.Render, _ *Options) {
			r.Programs = append(r.Programs, render.Program{Path: "/tool", HostPath: "/tool"})
		}, ErrUnsupported, "directly in /"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, opts := testRender(), goldenOptions()
			tc.change(r, &opts)
			_, err := Build(r, opts)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("got %v, want %v with %q", err, tc.want, tc.text)
			}
		})
	}
}

func TestFilesAndSeeding(t *testing.T) {
	r := testRender()
	r.Files = []render.File{
		{Path: render.ConfigDir + "/settings.json", Mode: 0o644, Content: "{}"},
		{Path: render.RunDir + "/codex/deep/config.toml", Mode: 0o600, Content: "x = 1\n"},
	}
	o, err := Build(r, goldenOptions())
	if err != nil {
		t.Fatal(err)
	}
	if o.ConfigMap.Data["hookbox_etc_settings.json"] != "{}" || o.ConfigMap.Data["run_hookbox_codex_deep_config.toml"] != "x = 1\n" || !*o.ConfigMap.Immutable {
		t.Errorf("ConfigMap data %v", o.ConfigMap.Data)
	}
	init := o.Job.Spec.Template.Spec.InitContainers
	if len(init) != 2 {
		t.Fatalf("init containers %+v", init)
	}
	wantDirs := []string{SeedProgram, "mkdir", "0700", "/run/hookbox/codex", "/run/hookbox/codex/deep", "/run/hookbox/home", "/run/hookbox/out"}
	if !slices.Equal(init[0].Command, wantDirs) {
		t.Errorf("seed dirs %q", init[0].Command)
	}
	wantFile := []string{SeedProgram, "install", "0600", "/hookbox/seed/codex/deep/config.toml", "/run/hookbox/codex/deep/config.toml"}
	if !slices.Equal(init[1].Command, wantFile) {
		t.Errorf("seed file %q", init[1].Command)
	}
	var mounted bool
	for _, m := range o.Job.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == render.ConfigDir && m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Error("the config dir is not mounted read-only")
	}
}

func TestNameFitsALabel(t *testing.T) {
	long := strings.Repeat("a", 49) + "-" + strings.Repeat("b", 13)
	name := Name(long, "sha256:0123456789abcdef")
	if len(name) > 63 || name != strings.Repeat("a", 49)+"-0123456789ab" {
		t.Errorf("Name = %q (%d)", name, len(name))
	}
}

func TestRunfileMounts(t *testing.T) {
	dir := func(p string) render.Runfile { return render.Runfile{Path: p, Type: render.RunfileDir, Mode: 0o755} }
	file := func(p string) render.Runfile { return render.Runfile{Path: p, Type: render.RunfileFile, Mode: 0o755} }
	link := func(p, target string) render.Runfile {
		return render.Runfile{Path: p, Type: render.RunfileSymlink, Mode: 0o777, Target: target}
	}
	podMounts := []string{"/dev", "/proc", "/sys", render.RunDir, render.TmpDir, render.WorkspaceDir, render.ConfigDir}
	merged := []render.Runfile{
		link("/bin", "usr/bin"), link("/lib64", "usr/lib64"),
		dir("/usr"), dir("/usr/bin"), dir("/usr/lib"), dir("/usr/lib/x86_64-linux-gnu"), dir("/usr/lib64"),
		link("/usr/bin/sh", "dash"), file("/usr/bin/dash"), file("/usr/bin/git"),
		file("/usr/lib/x86_64-linux-gnu/libc.so.6"), file("/usr/lib64/ld-linux-x86-64.so.2"),
		dir("/usr/lib/git-core"), file("/usr/lib/git-core/git-remote-http"),
		dir("/etc"), dir("/etc/alternatives"), link("/etc/alternatives/awk", "/usr/bin/mawk"), file("/usr/bin/mawk"),
		dir("/hookbox"), dir("/hookbox/host"), dir("/hookbox/host/tmp"), dir("/hookbox/host/tmp/src"), file("/hookbox/host/tmp/src/hook.sh"),
	}
	got, err := RunfileMounts(&render.Render{Runfiles: merged}, BaseImagePaths, podMounts)
	if err != nil {
		t.Fatal(err)
	}
	want := []RunfileMount{
		{"/bin", "usr/bin"},
		{"/etc/alternatives", "etc/alternatives"},
		{"/hookbox/host/tmp/src", "hookbox/host/tmp/src"},
		{"/lib64", "usr/lib64"},
		{"/usr/bin", "usr/bin"},
		{"/usr/lib/git-core", "usr/lib/git-core"},
		{"/usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"},
		{"/usr/lib64", "usr/lib64"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts\n got %v\nwant %v", got, want)
	}

	// A file right below a directory the image fills cannot be mounted.
	withCache := append(slices.Clone(merged), file("/etc/ld.so.cache"))
	if _, err := RunfileMounts(&render.Render{Runfiles: withCache}, BaseImagePaths, podMounts); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "/etc/ld.so.cache") {
		t.Errorf("ld.so.cache: %v", err)
	}
	// A directory entry nested in a mounted one is carried by it.
	nested := []render.Runfile{dir("/opt"), dir("/opt/x"), file("/opt/x/a"), dir("/opt/x/y"), file("/opt/x/y/b")}
	if got, err := RunfileMounts(&render.Render{Runfiles: nested}, BaseImagePaths, podMounts); err != nil || !slices.Equal(got, []RunfileMount{{"/opt/x", "opt/x"}}) {
		t.Errorf("nested: %v %v", got, err)
	}
	// A symlink loop is an error, not a hang.
	loop := []render.Runfile{link("/a", "b"), link("/b", "a")}
	if _, err := RunfileMounts(&render.Render{Runfiles: loop}, BaseImagePaths, podMounts); !errors.Is(err, ErrUnsupported) {
		t.Errorf("loop: %v", err)
	}
	// Without a manifest, program directories are mounted as they are.
	plan := &render.Render{Programs: []render.Program{{Path: "/bin/sh"}, {Path: "/usr/local/bin/claude"}, {Path: "/usr/bin/git"}}}
	if got, err := RunfileMounts(plan, BaseImagePaths, podMounts); err != nil ||
		!slices.Equal(got, []RunfileMount{{"/bin", "bin"}, {"/usr/bin", "usr/bin"}, {"/usr/local/bin", "usr/local/bin"}}) {
		t.Errorf("plan: %v %v", got, err)
	}
}

// TestBaseImagePathsMatchTheImage keeps BaseImagePaths in step with the
// base image definition.
func TestBaseImagePathsMatchTheImage(t *testing.T) {
	def := images.NewDefinition([]byte("a CA bundle"))
	if got := def.Paths(); !slices.Equal(got, BaseImagePaths) {
		t.Errorf("BaseImagePaths is stale:\n got %q\nwant %q", BaseImagePaths, got)
	}
}

// TestSeedProgramIsTheSeedImages: the seed containers run the program
// where the seed image holds it.
func TestSeedProgramIsTheSeedImages(t *testing.T) {
	if SeedProgram != images.SeedProgramPath {
		t.Errorf("SeedProgram %s, but the seed image holds hookbox-seed at %s", SeedProgram, images.SeedProgramPath)
	}
	// The proxy sidecar and its probe name hookbox on the image's PATH,
	// which has the proxy program's directory.
	o, err := Build(allowlistRender(dest("example.com", 443, render.DestName)), proxyOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	init := o.Job.Spec.Template.Spec.InitContainers
	proxy := init[len(init)-1]
	for _, argv := range [][]string{proxy.Command, proxy.StartupProbe.Exec.Command} {
		if argv[0] != path.Base(images.ProxyProgramPath) {
			t.Errorf("the proxy runs %q, but the proxy image holds %s", argv, images.ProxyProgramPath)
		}
	}
}

// TestRunfilesImagePerSpawn: RunfilesImages gives each spawn its own
// runfiles image; the others keep RunfilesImage, and a spawn with neither
// is refused.
func TestRunfilesImagePerSpawn(t *testing.T) {
	own := "registry.example/hookbox/runfiles:abc@sha256:" + strings.Repeat("4", 64)
	r := testRender()
	other := testRender()
	other.Spawn = "other"
	opts := goldenOptions()
	opts.RunfilesImages = map[string]string{r.Spawn: own}
	objs, err := BuildAll([]*render.Render{r, other}, opts)
	if err != nil {
		t.Fatal(err)
	}
	reference := func(o *Objects) string {
		for _, v := range o.Job.Spec.Template.Spec.Volumes {
			if v.Image != nil {
				return v.Image.Reference
			}
		}
		return ""
	}
	if got := reference(objs[0]); got != own {
		t.Errorf("spawn %s mounts %s, want its own %s", r.Spawn, got, own)
	}
	if got := reference(objs[1]); got != opts.RunfilesImage {
		t.Errorf("spawn other mounts %s, want the common %s", got, opts.RunfilesImage)
	}

	opts.RunfilesImage = ""
	if _, err := Build(other, opts); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "--runfiles-image") {
		t.Errorf("a spawn without a runfiles image: %v", err)
	}
	opts.RunfilesImages = map[string]string{r.Spawn: "runfiles:latest"}
	if _, err := Build(r, opts); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "runfiles:latest") {
		t.Errorf("a spawn's runfiles image not pinned: %v", err)
	}
}

// TestStrictDecodingRefuses: the strict decoder the tests rely on does fail
// on unknown fields, duplicate keys and type errors.
func TestStrictDecodingRefuses(t *testing.T) {
	dec := strictDecoder(t)
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec: {backofLimit: 0}\n",
		"duplicate key": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"type error":    "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec: {backoffLimit: none}\n",
	} {
		if obj, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded %T without an error", name, obj)
		}
	}
}

package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

// Defaults of Options.
const (
	DefaultSecretName       = "hookbox-secrets"
	DefaultHostEnvConfigMap = "hookbox-host-env"
	DefaultWorkspaceClaim   = "hookbox-workspace"
	DefaultTTLSeconds       = 24 * 60 * 60
)

// Fixed names of the objects' parts.
const (
	// EngineContainer is the container that runs the render's argv.
	EngineContainer = "engine"
	// RenderKey is the ConfigMap key holding the render's canonical JSON,
	// whose sha256 is the render digest.
	RenderKey = "render.json"
	// SeedDir is where the seed init containers see the files to seed.
	SeedDir = "/hookbox/seed"
	// SeedProgram is hookbox-seed in the seed image (images.SeedProgramPath):
	// the seed init containers' argv[0], an absolute path, so nothing is
	// looked up on a PATH.
	SeedProgram = "/usr/local/bin/hookbox-seed"
	// TerminationGraceSeconds matches launcher.DefaultGrace (SIGTERM, then
	// SIGKILL after the grace).
	TerminationGraceSeconds = 10
)

// Label and annotation keys. Labels select; annotations carry values too
// long or too free-form for a label.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelSpawn     = "hookbox.dev/spawn"
	// LabelRender holds the first 12 hex digits of the render digest.
	LabelRender = "hookbox.dev/render"
	// AnnotationRenderSHA256 holds the full render digest, lowercase hex
	// (with the runfiles manifest, when the render has one: the content
	// digest).
	AnnotationRenderSHA256 = "hookbox.dev/render-sha256"
	// AnnotationPlanSHA256 holds the render's plan digest, lowercase hex:
	// the digest hookbox run --expect-digest accepts from any checkout.
	AnnotationPlanSHA256 = "hookbox.dev/plan-sha256"
	// AnnotationRunfilesSHA256 holds the runfiles manifest digest (the
	// name of its tree in the runfiles store), when the render has one.
	AnnotationRunfilesSHA256 = "hookbox.dev/runfiles-sha256"
	AnnotationVersion        = "hookbox.dev/version"
	// AnnotationNotReproduced lists what the cluster does not enforce.
	AnnotationNotReproduced = "hookbox.dev/not-reproduced"
)

// Volume names.
const (
	volRunfiles  = "runfiles"
	volWorkspace = "workspace"
	volRun       = "run"
	volTmp       = "tmp"
	volConfig    = "config"
	volSeed      = "seed"
)

// maxConfigMapBytes is the API server's limit on a ConfigMap's data.
const maxConfigMapBytes = 1 << 20

// Errors.
var (
	// ErrOptions: an option is missing or malformed.
	ErrOptions = errors.New("k8s: invalid options")
	// ErrUnsupported: the render needs something a Job cannot give it.
	ErrUnsupported = errors.New("k8s: the render cannot run as a Kubernetes Job")
)

// Options say where the Job's parts come from in the cluster.
type Options struct {
	// Image runs the engine container: hookbox's base image (or one built
	// on it), pinned by digest (NAME@sha256:<hex>).
	Image string
	// RunfilesImage is an OCI image whose filesystem is the runfiles tree,
	// laid out like the host's "/", pinned by digest. It is mounted as an
	// image volume (Kubernetes ≥ 1.35 by default, GA in 1.36).
	RunfilesImage string
	// RunfilesImages maps a spawn name to the runfiles image of that spawn
	// alone (hookbox render --build builds one per spawn); a spawn not in
	// it gets RunfilesImage.
	RunfilesImages map[string]string
	// SeedImage runs the init containers that prepare the run dir:
	// hookbox's seed image (hookbox image build), which holds the static
	// hookbox-seed at SeedProgram, pinned by digest.
	SeedImage string
	// WorkspaceClaim names the PersistentVolumeClaim holding the checkout
	// to review, mounted read-only at /workspace (DefaultWorkspaceClaim).
	WorkspaceClaim string
	// SecretName names the Secret whose keys are the secret variables'
	// names (DefaultSecretName).
	SecretName string
	// HostEnvConfigMap names the ConfigMap that plays the build host's
	// environment for allow-listed variables (DefaultHostEnvConfigMap).
	HostEnvConfigMap string
	// Namespace of every object; empty leaves it to kubectl.
	Namespace string
	// TTLSecondsAfterFinished; nil means DefaultTTLSeconds.
	TTLSecondsAfterFinished *int32
	// ProxyImage runs the egress proxy sidecar of an allowlist render: an
	// image holding the hookbox binary on its PATH, pinned by digest.
	// Required for such renders only.
	ProxyImage string
	// Cilium adds a cilium.io/v2 CiliumNetworkPolicy to an allowlist
	// render's objects, which allows names by FQDN, and narrows the
	// NetworkPolicy to IP entries (both apply under Cilium, and allows add
	// up).
	Cilium bool
	// Version is hookbox's version, for the annotation.
	Version string
	// ImagePaths are the paths Image holds, which runfile mounts must not
	// cover; nil means BaseImagePaths.
	ImagePaths []string
}

// Objects are the Kubernetes objects of one spawn, in apply order.
type Objects struct {
	Spawn         string
	RenderDigest  string // "sha256:<hex>"
	ConfigMap     *corev1.ConfigMap
	NetworkPolicy *networkingv1.NetworkPolicy
	// CiliumNetworkPolicy is set for an allowlist render with
	// Options.Cilium: a cilium.io/v2 object, as JSON-shaped maps.
	CiliumNetworkPolicy map[string]any
	Job                 *batchv1.Job
}

// pinnedRef: NAME@sha256:<64 hex>, NAME without "@" or whitespace.
func pinnedRef(ref string) bool {
	name, digest, ok := strings.Cut(ref, "@")
	return ok && name != "" && !strings.ContainsAny(name, " \t\n\f\r") && render.ValidDigest(digest)
}

func (o Options) withDefaults() (Options, error) {
	if o.WorkspaceClaim == "" {
		o.WorkspaceClaim = DefaultWorkspaceClaim
	}
	if o.SecretName == "" {
		o.SecretName = DefaultSecretName
	}
	if o.HostEnvConfigMap == "" {
		o.HostEnvConfigMap = DefaultHostEnvConfigMap
	}
	if o.TTLSecondsAfterFinished == nil {
		o.TTLSecondsAfterFinished = ptr(int32(DefaultTTLSeconds))
	}
	if o.ImagePaths == nil {
		o.ImagePaths = BaseImagePaths
	}
	var problems []string
	for _, img := range []struct{ flag, ref string }{
		{"image", o.Image}, {"runfiles-image", o.RunfilesImage}, {"seed-image", o.SeedImage},
	} {
		if img.flag == "runfiles-image" && img.ref == "" && len(o.RunfilesImages) > 0 {
			continue // every spawn's is checked below, once it is chosen
		}
		if !pinnedRef(img.ref) {
			problems = append(problems, fmt.Sprintf("--%s %q: give an image pinned by digest, NAME@sha256:<64 hex>", img.flag, img.ref))
		}
	}
	for _, spawn := range slices.Sorted(maps.Keys(o.RunfilesImages)) {
		if ref := o.RunfilesImages[spawn]; !pinnedRef(ref) {
			problems = append(problems, fmt.Sprintf("runfiles image %q of spawn %s: give an image pinned by digest, NAME@sha256:<64 hex>", ref, spawn))
		}
	}
	for _, name := range []struct{ flag, value string }{
		{"workspace-claim", o.WorkspaceClaim}, {"secret-name", o.SecretName}, {"host-env-configmap", o.HostEnvConfigMap},
	} {
		if errs := validation.IsDNS1123Subdomain(name.value); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("--%s %q: %s", name.flag, name.value, strings.Join(errs, "; ")))
		}
	}
	if o.ProxyImage != "" && !pinnedRef(o.ProxyImage) {
		problems = append(problems, fmt.Sprintf("--proxy-image %q: give an image pinned by digest, NAME@sha256:<64 hex>", o.ProxyImage))
	}
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("--namespace %q: %s", o.Namespace, strings.Join(errs, "; ")))
		}
	}
	if *o.TTLSecondsAfterFinished < 0 {
		problems = append(problems, "the TTL after a finished Job cannot be negative")
	}
	if len(problems) > 0 {
		return o, fmt.Errorf("%w: %s", ErrOptions, strings.Join(problems, "; "))
	}
	return o, nil
}

// Name is the name of a spawn's Job, ConfigMap and NetworkPolicy: the spawn
// name (cut to 50 characters) and the first 12 hex digits of the render
// digest, at most 63 characters, as a pod's job-name label requires.
func Name(spawn, renderDigest string) string {
	hex := strings.TrimPrefix(renderDigest, "sha256:")
	if len(hex) > 12 {
		hex = hex[:12]
	}
	if len(spawn) > 50 {
		spawn = strings.TrimRight(spawn[:50], "-")
	}
	return spawn + "-" + hex
}

// BuildAll builds the objects of every render, refusing two spawns that
// would get the same name.
func BuildAll(renders []*render.Render, opts Options) ([]*Objects, error) {
	out := make([]*Objects, 0, len(renders))
	seen := map[string]string{}
	for _, r := range renders {
		o, err := Build(r, opts)
		if err != nil {
			return nil, fmt.Errorf("spawn %s: %w", r.Spawn, err)
		}
		if first, dup := seen[o.Job.Name]; dup {
			return nil, fmt.Errorf("%w: spawns %s and %s would both be named %s", ErrUnsupported, first, r.Spawn, o.Job.Name)
		}
		seen[o.Job.Name] = r.Spawn
		out = append(out, o)
	}
	return out, nil
}

// Build builds the objects of one render.
func Build(r *render.Render, opts Options) (*Objects, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(r.Process.Argv) == 0 {
		return nil, fmt.Errorf("%w: the render has no argv", ErrUnsupported)
	}
	switch r.Network {
	case render.NetworkNone:
	case render.NetworkAllowlist:
		if r.Egress == nil || len(r.Egress.Allow) == 0 {
			return nil, fmt.Errorf("%w: the render's network is %s but it lists no destinations; recompile the spec", ErrUnsupported, r.Network)
		}
		if opts.ProxyImage == "" {
			return nil, fmt.Errorf("%w: spawn %s has an egress allowlist: give --proxy-image, an image holding the hookbox binary pinned by digest (NAME@sha256:<64 hex>), for its egress proxy sidecar", ErrOptions, r.Spawn)
		}
	default:
		return nil, fmt.Errorf("%w: network %q; only none is known", ErrUnsupported, r.Network)
	}
	digest, canonical, err := r.Digest()
	if err != nil {
		return nil, err
	}
	hex := strings.TrimPrefix(digest, "sha256:")
	name := Name(r.Spawn, digest)
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: name %q: %s", ErrUnsupported, name, strings.Join(errs, "; "))
	}
	labels := map[string]string{
		LabelManagedBy: "hookbox",
		LabelSpawn:     r.Spawn,
		LabelRender:    hex[:12],
	}
	planDigest, _, err := r.PlanDigest()
	if err != nil {
		return nil, err
	}
	annotations := map[string]string{
		AnnotationRenderSHA256: hex,
		AnnotationPlanSHA256:   strings.TrimPrefix(planDigest, "sha256:"),
		AnnotationVersion:      opts.Version,
	}
	if len(r.Runfiles) > 0 {
		runfilesDigest, _, err := canonjson.Digest(r.Runfiles)
		if err != nil {
			return nil, err
		}
		annotations[AnnotationRunfilesSHA256] = strings.TrimPrefix(runfilesDigest, "sha256:")
	}
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: clone(labels), Annotations: clone(annotations)}
	}

	b := &builder{r: r, opts: opts, name: name}
	cm, err := b.configMap(meta(), string(canonical))
	if err != nil {
		return nil, err
	}
	pod, err := b.podSpec()
	if err != nil {
		return nil, err
	}
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: meta(),
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr(int32(0)),
			TTLSecondsAfterFinished: opts.TTLSecondsAfterFinished,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					// Eviction and preemption say nothing about the review:
					// the pod is replaced without counting as a failure.
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
				},
				{
					// A failed engine is final, as on a build host.
					Action: batchv1.PodFailurePolicyActionFailJob,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						ContainerName: ptr(EngineContainer), Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0},
					},
				},
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: clone(labels), Annotations: clone(annotations)},
				Spec:       pod,
			},
		},
	}
	if notes := notReproduced(r, opts.Cilium); len(notes) > 0 {
		job.Annotations[AnnotationNotReproduced] = strings.Join(notes, "; ")
	}
	if r.Limits.TimeoutMS > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr((r.Limits.TimeoutMS + 999) / 1000)
	}
	selector := map[string]string{LabelSpawn: r.Spawn, LabelRender: hex[:12]}
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta(),
		Spec: networkingv1.NetworkPolicySpec{
			// No rule: no traffic in or out of the pod; loopback inside it
			// is untouched, like the render's network "none".
			PodSelector: metav1.LabelSelector{MatchLabels: clone(selector)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	objs := &Objects{Spawn: r.Spawn, RenderDigest: digest, ConfigMap: cm, NetworkPolicy: np, Job: job}
	if r.Network == render.NetworkAllowlist {
		if np.Spec.Egress, err = egressRules(r.Egress, opts.Cilium); err != nil {
			return nil, err
		}
		if opts.Cilium {
			if objs.CiliumNetworkPolicy, err = ciliumPolicy(meta(), selector, r.Egress); err != nil {
				return nil, err
			}
		}
	}
	return objs, nil
}

// notReproduced lists what the render asks for that the cluster does not
// enforce.
func notReproduced(r *render.Render, cilium bool) []string {
	var notes []string
	if r.Limits.Pids > 0 {
		notes = append(notes, fmt.Sprintf("pids limit %d (no per-container limit in Kubernetes: the kubelet's podPidsLimit applies)", r.Limits.Pids))
	}
	if r.Limits.FirstOutputMS > 0 || r.Limits.IdleMS > 0 {
		notes = append(notes, "first-output and idle watchdogs (only activeDeadlineSeconds applies)")
	}
	notes = append(notes, "noexec on "+render.RunDir+" and "+render.TmpDir+" (emptyDir mounts allow exec)")
	if r.Limits.TmpfsInodes > 0 {
		notes = append(notes, fmt.Sprintf("inode limit %d on %s and %s (an emptyDir has a sizeLimit only)", r.Limits.TmpfsInodes, render.RunDir, render.TmpDir))
	}
	if r.Limits.OutputBytes > 0 {
		notes = append(notes, fmt.Sprintf("output cap %d bytes per stream (the kubelet's containerLogMaxSize rotation applies instead)", r.Limits.OutputBytes))
	}
	if len(r.Artifacts) > 0 {
		notes = append(notes, "artifact harvest (the run dir ends with the pod)")
	}
	if r.Trace.Mode != render.TraceOff && r.Trace.Mode != "" {
		notes = append(notes, "exec trace "+string(r.Trace.Mode)+" (needs a node-level tracer)")
	}
	if slices.ContainsFunc(r.Files, func(f render.File) bool { return len(f.Slots) > 0 }) {
		notes = append(notes, "hook launch slots (the hooks get {run_id} and {run_dir} as written: no launcher fills them)")
	}
	// What every pod's container sees beyond the render (cluster/parity_test.go).
	notes = append(notes,
		"the runtime mounts the container's cgroups read-only at /sys/fs/cgroup (a hookbox run container has no cgroupfs)",
		"the kubelet adds HOSTNAME and the kubernetes service's KUBERNETES_SERVICE_* and KUBERNETES_PORT* variables to the environment",
		"nosuid and nodev on "+render.RunDir+", "+render.TmpDir+", "+render.WorkspaceDir+" and "+render.ConfigDir+", noexec on the last two (the kubelet mounts volumes ro or rw only)",
		"supplementary groups: the runtime gives the process its group 65532 as a supplementary group too (hookbox run: none)",
		"seccomp: the runtime's default profile (RuntimeDefault) admits the compat syscall ABIs and ptrace, process_vm_readv/writev, pidfd_getfd, kcmp, process_madvise (hookbox run: the native ABI alone, those denied)")
	if r.Network == render.NetworkAllowlist {
		return append(notes, egressNotes(r.Egress, cilium)...)
	}
	notes = append(notes, "network none only where the CNI enforces NetworkPolicy")
	return notes
}

type builder struct {
	r    *render.Render
	opts Options
	name string
	// configItems and seedItems map ConfigMap keys to paths below
	// render.ConfigDir and render.RunDir.
	configItems, seedItems []corev1.KeyToPath
	seedFiles              []render.File
}

// fileKey is a file's ConfigMap key: its path without the leading slash,
// slashes as '_'.
func fileKey(p string) string {
	return strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "_")
}

func (b *builder) configMap(meta metav1.ObjectMeta, canonical string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: meta,
		// Named by the render digest: its content never changes.
		Immutable: ptr(true),
		Data:      map[string]string{RenderKey: canonical},
	}
	size := len(canonical)
	for _, f := range b.r.Files {
		key := fileKey(f.Path)
		if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
			return nil, fmt.Errorf("%w: generated file %s: ConfigMap key %q: %s", ErrUnsupported, f.Path, key, strings.Join(errs, "; "))
		}
		if _, dup := cm.Data[key]; dup || cm.BinaryData[key] != nil {
			return nil, fmt.Errorf("%w: generated files collide on ConfigMap key %q", ErrUnsupported, key)
		}
		if utf8.ValidString(f.Content) {
			cm.Data[key] = f.Content
		} else {
			if cm.BinaryData == nil {
				cm.BinaryData = map[string][]byte{}
			}
			cm.BinaryData[key] = []byte(f.Content)
		}
		size += len(f.Content)
		mode := int32(f.Mode & 0o777)
		if mode == 0 {
			mode = 0o600
		}
		switch {
		case render.Within(f.Path, render.ConfigDir) && f.Path != render.ConfigDir:
			// ConfigMap files are owned by root: keep the render's bits
			// and make them readable, since only the container user reads.
			b.configItems = append(b.configItems, corev1.KeyToPath{
				Key: key, Path: strings.TrimPrefix(f.Path, render.ConfigDir+"/"), Mode: ptr(mode | 0o444),
			})
		case render.Within(f.Path, render.RunDir) && f.Path != render.RunDir:
			b.seedItems = append(b.seedItems, corev1.KeyToPath{Key: key, Path: strings.TrimPrefix(f.Path, render.RunDir+"/")})
			b.seedFiles = append(b.seedFiles, f)
		default:
			return nil, fmt.Errorf("%w: generated file %s is under neither %s nor %s", ErrUnsupported, f.Path, render.ConfigDir, render.RunDir)
		}
	}
	if size > maxConfigMapBytes {
		return nil, fmt.Errorf("%w: the render and its files take %d bytes, more than a ConfigMap holds (%d)", ErrUnsupported, size, maxConfigMapBytes)
	}
	return cm, nil
}

// escape protects a string from the kubelet's $(VAR) expansion in command,
// args and env values: "$$" expands to "$", so the process sees s.
func escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func escapeAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = escape(s)
	}
	return out
}

func (b *builder) podSpec() (corev1.PodSpec, error) {
	r := b.r
	uid, gid := int64(r.Process.UID), int64(r.Process.GID)
	volumes, mounts, err := b.volumes()
	if err != nil {
		return corev1.PodSpec{}, err
	}
	env, err := b.env()
	if err != nil {
		return corev1.PodSpec{}, err
	}
	resources := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if r.Limits.MemoryBytes > 0 {
		q := *resource.NewQuantity(r.Limits.MemoryBytes, resource.BinarySI)
		resources.Limits[corev1.ResourceMemory], resources.Requests[corev1.ResourceMemory] = q, q
	}
	if r.Limits.MilliCPUs > 0 {
		q := *resource.NewMilliQuantity(r.Limits.MilliCPUs, resource.DecimalSI)
		resources.Limits[corev1.ResourceCPU], resources.Requests[corev1.ResourceCPU] = q, q
	}
	initContainers := b.seedContainers(uid, gid)
	if r.Network == render.NetworkAllowlist {
		// Last: the run dir is seeded before the proxy starts, and the
		// engine starts once the proxy's startup probe passes.
		proxy, err := b.proxyContainer()
		if err != nil {
			return corev1.PodSpec{}, err
		}
		initContainers = append(initContainers, proxy)
		volumes = append(volumes, b.renderVolume())
		slices.SortFunc(volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
	}
	engine := corev1.Container{
		Name:            EngineContainer,
		Image:           b.opts.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         escapeAll(r.Process.Argv[:1]),
		Args:            escapeAll(r.Process.Argv[1:]),
		WorkingDir:      r.Process.Cwd,
		Env:             env,
		Resources:       resources,
		VolumeMounts:    mounts,
		SecurityContext: containerSecurity(uid, gid),
	}
	return corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		Hostname:                      r.Spawn,
		AutomountServiceAccountToken:  ptr(false),
		EnableServiceLinks:            ptr(false),
		TerminationGracePeriodSeconds: ptr(int64(TerminationGraceSeconds)),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr(true),
			RunAsUser:      ptr(uid),
			RunAsGroup:     ptr(gid),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		InitContainers: initContainers,
		Containers:     []corev1.Container{engine},
		Volumes:        volumes,
	}, nil
}

func containerSecurity(uid, gid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr(true),
		RunAsUser:                ptr(uid),
		RunAsGroup:               ptr(gid),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Privileged:               ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func (b *builder) env() ([]corev1.EnvVar, error) {
	var out []corev1.EnvVar
	for _, e := range b.r.Process.Env {
		v := corev1.EnvVar{Name: e.Name}
		switch e.Source {
		case render.EnvHookbox, render.EnvSet:
			v.Value = escape(e.Value)
		case render.EnvHost, render.EnvSecret:
			if errs := validation.IsConfigMapKey(e.Name); len(errs) > 0 {
				return nil, fmt.Errorf("%w: variable %s cannot be a key: %s", ErrUnsupported, e.Name, strings.Join(errs, "; "))
			}
			if e.Source == render.EnvHost {
				v.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: b.opts.HostEnvConfigMap}, Key: e.Name, Optional: ptr(true),
				}}
			} else {
				v.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: b.opts.SecretName}, Key: e.Name,
				}}
			}
		default:
			return nil, fmt.Errorf("%w: variable %s has source %q", ErrUnsupported, e.Name, e.Source)
		}
		out = append(out, v)
	}
	return out, nil
}

// volumes returns the pod's volumes and the engine container's mounts.
func (b *builder) volumes() ([]corev1.Volume, []corev1.VolumeMount, error) {
	r := b.r
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	podMounts := []string{"/dev", "/proc", "/sys"}
	var sawWorkspace, sawRun bool
	for _, m := range r.Mounts {
		podMounts = append(podMounts, m.Destination)
		switch {
		case m.Kind == render.MountBind && m.Destination == render.WorkspaceDir:
			if !m.ReadOnly {
				return nil, nil, fmt.Errorf("%w: the workspace mount is read-write", ErrUnsupported)
			}
			sawWorkspace = true
			volumes = append(volumes, corev1.Volume{Name: volWorkspace, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: b.opts.WorkspaceClaim, ReadOnly: true},
			}})
			mounts = append(mounts, corev1.VolumeMount{Name: volWorkspace, MountPath: render.WorkspaceDir, ReadOnly: true})
		case m.Kind == render.MountOverlay:
			return nil, nil, fmt.Errorf("%w: the workspace is an overlay (workspace mode overlay), which a Job cannot harvest as workspace.patch; use the read-only form (workspace: DIR) for the cluster", ErrUnsupported)
		case m.Kind == render.MountBind:
			return nil, nil, fmt.Errorf("%w: %s is a grant of host directory %s (addDirs); a Job has no host directories: leave addDirs out of specs for the cluster", ErrUnsupported, m.Destination, m.Source)
		case m.Kind == render.MountTmpfs && (m.Destination == render.RunDir || m.Destination == render.TmpDir):
			if m.SizeBytes <= 0 {
				return nil, nil, fmt.Errorf("%w: tmpfs %s has no size", ErrUnsupported, m.Destination)
			}
			name := volTmp
			if m.Destination == render.RunDir {
				name, sawRun = volRun, true
			}
			volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(m.SizeBytes, resource.BinarySI)},
			}})
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Destination})
		default:
			return nil, nil, fmt.Errorf("%w: %s mount at %s", ErrUnsupported, m.Kind, m.Destination)
		}
	}
	if !sawWorkspace || !sawRun {
		return nil, nil, fmt.Errorf("%w: the render lacks the workspace or the run dir mount; recompile the spec", ErrUnsupported)
	}
	if len(b.configItems) > 0 {
		podMounts = append(podMounts, render.ConfigDir)
		volumes = append(volumes, corev1.Volume{Name: volConfig, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: b.name}, Items: b.configItems},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: volConfig, MountPath: render.ConfigDir, ReadOnly: true})
	}
	if len(b.seedItems) > 0 {
		volumes = append(volumes, corev1.Volume{Name: volSeed, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: b.name}, Items: b.seedItems},
		}})
	}
	runfiles, err := RunfileMounts(r, b.opts.ImagePaths, podMounts)
	if err != nil {
		return nil, nil, err
	}
	runfilesImage := b.opts.RunfilesImage
	if ref, ok := b.opts.RunfilesImages[r.Spawn]; ok {
		runfilesImage = ref
	}
	if runfilesImage == "" {
		return nil, nil, fmt.Errorf("%w: no runfiles image for spawn %s: give --runfiles-image", ErrOptions, r.Spawn)
	}
	volumes = append(volumes, corev1.Volume{Name: volRunfiles, VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: runfilesImage, PullPolicy: corev1.PullIfNotPresent},
	}})
	for _, m := range runfiles {
		mounts = append(mounts, corev1.VolumeMount{Name: volRunfiles, MountPath: m.MountPath, SubPath: m.SubPath, ReadOnly: true})
	}
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return render.ComparePaths(a.MountPath, b.MountPath) })
	slices.SortFunc(volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
	return volumes, mounts, nil
}

// seedContainers prepare the run dir as the launcher does on a host: home
// and out, then every generated file under the run dir with its mode, all
// owned by the container user. Argv only: no shell, hookbox-seed
// (SeedProgram) of the seed image, each directory listed parents first.
func (b *builder) seedContainers(uid, gid int64) []corev1.Container {
	dirs := []string{render.HomeDir, render.OutDir}
	for _, f := range b.seedFiles {
		for d := path.Dir(f.Path); d != render.RunDir && render.Within(d, render.RunDir); d = path.Dir(d) {
			dirs = append(dirs, d)
		}
	}
	slices.SortFunc(dirs, render.ComparePaths)
	dirs = slices.Compact(dirs)
	seedResources := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	runMount := corev1.VolumeMount{Name: volRun, MountPath: render.RunDir}
	containers := []corev1.Container{{
		Name:            "seed-dirs",
		Image:           b.opts.SeedImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         escapeAll(append([]string{SeedProgram, "mkdir", "0700"}, dirs...)),
		Resources:       seedResources,
		VolumeMounts:    []corev1.VolumeMount{runMount},
		SecurityContext: containerSecurity(uid, gid),
	}}
	for i, f := range b.seedFiles {
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o600
		}
		containers = append(containers, corev1.Container{
			Name:            fmt.Sprintf("seed-file-%d", i+1),
			Image:           b.opts.SeedImage,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command: escapeAll([]string{SeedProgram, "install", fmt.Sprintf("%04o", mode),
				SeedDir + "/" + strings.TrimPrefix(f.Path, render.RunDir+"/"), f.Path}),
			Resources:       seedResources,
			VolumeMounts:    []corev1.VolumeMount{runMount, {Name: volSeed, MountPath: SeedDir, ReadOnly: true}},
			SecurityContext: containerSecurity(uid, gid),
		})
	}
	return containers
}

// Marshal writes the objects as multi-document YAML, each document starting
// with "---": per spawn its ConfigMap, NetworkPolicy, CiliumNetworkPolicy
// (when there is one) and Job. The bytes
// depend on the objects only (keys sorted).
func Marshal(objs []*Objects) ([]byte, error) {
	var out bytes.Buffer
	for _, o := range objs {
		docs := []any{o.ConfigMap, o.NetworkPolicy, o.Job}
		if o.CiliumNetworkPolicy != nil {
			docs = []any{o.ConfigMap, o.NetworkPolicy, o.CiliumNetworkPolicy, o.Job}
		}
		for _, obj := range docs {
			doc, err := marshalDocument(obj)
			if err != nil {
				return nil, fmt.Errorf("spawn %s: %w", o.Spawn, err)
			}
			out.WriteString("---\n")
			out.Write(doc)
		}
	}
	return out.Bytes(), nil
}

// YAML builds and marshals the objects of every render.
func YAML(renders []*render.Render, opts Options) ([]byte, error) {
	objs, err := BuildAll(renders, opts)
	if err != nil {
		return nil, err
	}
	return Marshal(objs)
}

// marshalDocument is sigs.k8s.io/yaml's encoding of obj without the empty
// status that k8s.io/api structs always carry.
func marshalDocument(obj any) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if status, ok := doc["status"].(map[string]any); ok && len(status) == 0 {
		delete(doc, "status")
	}
	return yaml.Marshal(doc)
}

func ptr[T any](v T) *T { return &v }

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

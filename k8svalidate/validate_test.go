package k8svalidate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	jobregistry "k8s.io/kubernetes/pkg/registry/batch/job"
	configmapregistry "k8s.io/kubernetes/pkg/registry/core/configmap"
	networkpolicyregistry "k8s.io/kubernetes/pkg/registry/networking/networkpolicy"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/k8s"
)

const namespace = "reviews"

func pinned(name string) string {
	return "registry.example/hookbox/" + name + "@sha256:" + strings.Repeat(fmt.Sprintf("%x", len(name)%16), 64)
}

var options = k8s.Options{
	Image: pinned("base"), RunfilesImage: pinned("runfiles"), SeedImage: pinned("seed"), ProxyImage: pinned("proxy"),
	Namespace: namespace, Version: "v0.0.0-k8svalidate",
}

// examples are every spec in ../examples, with the values a pipeline
// would pass where the spec declares params.
var examples = []struct {
	name   string
	params map[string]string
}{
	{"codex", nil},
	{"egress", nil},
	{"gateway", nil},
	{"hello", nil},
	{"pipeline", map[string]string{"pr": "123", "ref": "refs/pull/123/head"}},
	{"review", nil},
}

func renderExample(t *testing.T, name string, params map[string]string) ([]*render.Render, []byte) {
	t.Helper()
	renders, err := compiler.CompileFileWithParams("../examples/"+name+".yaml", params)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	data, err := k8s.YAML(renders, options)
	if err != nil {
		t.Fatalf("k8s %s: %v", name, err)
	}
	return renders, data
}

func splitDocuments(t *testing.T, data []byte) [][]byte {
	t.Helper()
	if !bytes.HasPrefix(data, []byte("---\n")) {
		t.Fatal("output does not start with a document separator")
	}
	return bytes.Split(data[4:], []byte("\n---\n"))
}

// strict decodes YAML into the versioned types registered by the install
// packages; unknown fields, duplicate keys and type errors are errors.
var strict = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decode decodes one document strictly. Decode can return an object and an
// error together (a strict decoding error): any error fails.
func decode(t *testing.T, doc []byte) runtime.Object {
	t.Helper()
	obj, _, err := strict.Decode(doc, nil, nil)
	if err != nil {
		t.Fatalf("strict decoding: %v\n%s", err, doc)
	}
	return obj
}

var strategies = map[string]struct {
	strategy rest.RESTCreateStrategy
	resource string
}{
	"Job":           {jobregistry.Strategy, "jobs"},
	"ConfigMap":     {configmapregistry.Strategy, "configmaps"},
	"NetworkPolicy": {networkpolicyregistry.Strategy, "networkpolicies"},
}

// create runs what the API server runs for a create of obj (a versioned
// object as decoded): defaulting, conversion to the internal version, and
// rest.BeforeCreate with the kind's strategy (PrepareForCreate, name and
// metadata checks, Validate, declarative validation), after filling the
// system metadata as the generic registry does. It returns the
// field errors as "<reason> <field>: <message>", sorted, the strategy's warnings, and
// the internal object.
func create(t *testing.T, obj runtime.Object) (causes, warnings []string, internal runtime.Object) {
	t.Helper()
	gvk := obj.GetObjectKind().GroupVersionKind()
	s, ok := strategies[gvk.Kind]
	if !ok {
		t.Fatalf("no strategy for %v", gvk)
	}
	legacyscheme.Scheme.Default(obj)
	internal, err := legacyscheme.Scheme.ConvertToVersion(obj, schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		t.Fatalf("convert %v: %v", gvk, err)
	}
	ctx := genericapirequest.WithNamespace(context.Background(), namespace)
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIPrefix: "apis", APIGroup: gvk.Group, APIVersion: gvk.Version,
		Namespace: namespace, Resource: s.resource,
	})
	// The generic registry fills uid and creationTimestamp before it calls
	// BeforeCreate (Store.Create).
	objMeta, err := meta.Accessor(internal)
	if err != nil {
		t.Fatal(err)
	}
	rest.FillObjectMetaSystemFields(objMeta)
	err = rest.BeforeCreate(s.strategy, ctx, internal)
	var status apierrors.APIStatus
	switch {
	case err == nil:
	case errors.As(err, &status) && status.Status().Details != nil:
		for _, c := range status.Status().Details.Causes {
			causes = append(causes, string(c.Type)+" "+c.Field+": "+c.Message)
		}
		if len(status.Status().Details.Causes) == 0 || causes[0] == " " {
			t.Fatalf("create %v: %v", gvk, err)
		}
	default:
		t.Fatalf("create %v: %v", gvk, err)
	}
	sort.Strings(causes)
	return causes, s.strategy.WarningsOnCreate(ctx, internal), internal
}

// TestExamplesPassTheAPIServer: every document of every example decodes
// strictly and is created with no error and no warning; each Job's pod
// passes the "restricted" Pod Security Standard; the argv the kubelet
// hands the engine (after its $(VAR) expansion) is the render's.
func TestExamplesPassTheAPIServer(t *testing.T) {
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			renders, data := renderExample(t, ex.name, ex.params)
			docs := splitDocuments(t, data)
			if len(docs) != 3*len(renders) {
				t.Fatalf("%d documents for %d renders", len(docs), len(renders))
			}
			for i, doc := range docs {
				obj := decode(t, doc)
				kind := obj.GetObjectKind().GroupVersionKind().Kind
				if job, ok := obj.(*batchv1.Job); ok {
					r := renders[i/3]
					checkArgv(t, job, r)
					for _, res := range evaluator.EvaluatePod(restricted, &job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec) {
						if !res.Allowed {
							t.Errorf("%s: pod is not restricted: %s: %s", job.Name, res.ForbiddenReason, res.ForbiddenDetail)
						}
					}
				}
				causes, warnings, _ := create(t, obj)
				if len(causes) > 0 || len(warnings) > 0 {
					t.Errorf("%s %d: errors %q, warnings %q", kind, i, causes, warnings)
				}
			}
		})
	}
}

// checkArgv expands the engine container's command and args the way the
// kubelet does, with the container's literal environment, and compares
// them with the render's engine argv.
func checkArgv(t *testing.T, job *batchv1.Job, r *render.Render) {
	t.Helper()
	var engine *corev1.Container
	for i := range job.Spec.Template.Spec.Containers {
		if job.Spec.Template.Spec.Containers[i].Name == k8s.EngineContainer {
			engine = &job.Spec.Template.Spec.Containers[i]
		}
	}
	if engine == nil {
		t.Fatalf("%s: no engine container", job.Name)
	}
	env := map[string]string{}
	for _, e := range engine.Env {
		if e.ValueFrom == nil {
			env[e.Name] = expansion.Expand(e.Value, expansion.MappingFuncFor(env))
		}
	}
	var argv []string
	for _, s := range slices.Concat(engine.Command, engine.Args) {
		argv = append(argv, expansion.Expand(s, expansion.MappingFuncFor(env)))
	}
	// The process argv: the init, then the engine's exact argv.
	if !slices.Equal(argv, r.Process.Argv) || len(argv) == 0 || argv[0] != render.InitPath || !slices.Equal(argv[1:], r.Engine.Exec.Argv) {
		t.Errorf("%s: argv after expansion\n got %q\nwant %q", job.Name, argv, r.Process.Argv)
	}
	for _, e := range r.Process.Env {
		if (e.Source == render.EnvHookbox || e.Source == render.EnvSet) && env[e.Name] != e.Value {
			t.Errorf("%s: env %s = %q after expansion, want %q", job.Name, e.Name, env[e.Name], e.Value)
		}
	}
}

// TestEscapingSurvivesTheKubelet: argv and env values with '$' reach the
// process unchanged.
func TestEscapingSurvivesTheKubelet(t *testing.T) {
	r := &render.Render{
		SchemaVersion: render.SchemaVersion, Spawn: "dollars", Network: "none",
		Engine: render.Engine{Kind: "exec", Exec: render.Exec{Path: "/usr/bin/tool", Argv: []string{"/usr/bin/tool", "$(HOME)", "$$", "a$", "$(X"}}},
		Init:   &render.Exec{Path: render.InitPath, Argv: []string{render.InitPath, "/usr/bin/tool", "$(HOME)", "$$", "a$", "$(X"}},
		Process: render.Process{
			Argv: []string{render.InitPath, "/usr/bin/tool", "$(HOME)", "$$", "a$", "$(X"}, Cwd: render.WorkspaceDir, UID: 65532, GID: 65532,
			Env: []render.EnvVar{{Name: "HOME", Source: render.EnvHookbox, Value: "/h"}, {Name: "X", Source: render.EnvSet, Value: "$(HOME)/x"}},
		},
		Programs: []render.Program{{Path: "/usr/bin/tool", HostPath: "/usr/bin/tool", Roles: []string{render.RoleEngine}}},
		Mounts: []render.Mount{
			{Destination: render.RunDir, Kind: render.MountTmpfs, SizeBytes: 1 << 20},
			{Destination: render.TmpDir, Kind: render.MountTmpfs, SizeBytes: 1 << 20},
			{Destination: render.WorkspaceDir, Kind: render.MountBind, Source: "/src", ReadOnly: true},
		},
		Limits: render.Limits{TimeoutMS: 60000, MemoryBytes: 1 << 30, TmpfsBytes: 1 << 20},
	}
	data, err := k8s.YAML([]*render.Render{r}, options)
	if err != nil {
		t.Fatal(err)
	}
	docs := splitDocuments(t, data)
	job := decode(t, docs[2]).(*batchv1.Job)
	checkArgv(t, job, r)
	if causes, warnings, _ := create(t, job); len(causes)+len(warnings) > 0 {
		t.Errorf("errors %q, warnings %q", causes, warnings)
	}
}

// TestBrokenJobsFailAsTheAPIServerSays: deliberately broken variants of a
// generated Job fail with exactly the API server's errors.
func TestBrokenJobsFailAsTheAPIServerSays(t *testing.T) {
	_, data := renderExample(t, "review", nil)
	base := decode(t, splitDocuments(t, data)[2]).(*batchv1.Job)
	engine := func(j *batchv1.Job) *corev1.Container { return &j.Spec.Template.Spec.Containers[0] }
	cases := []struct {
		name   string
		break_ func(*batchv1.Job)
		want   []string
	}{
		{"bad name", func(j *batchv1.Job) { j.Name = "Review_Job" }, []string{
			`FieldValueInvalid metadata.name: Invalid value: "Review_Job": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		}},
		{"negative backoffLimit", func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr(int32(-1)) }, []string{
			"FieldValueInvalid spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
		}},
		{"restartPolicy Always", func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways }, []string{
			`FieldValueRequired spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"`,
		}},
		{"empty image", func(j *batchv1.Job) { engine(j).Image = "" }, []string{
			"FieldValueRequired spec.template.spec.containers[0].image: Required value",
		}},
		{"duplicate container name", func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers = append(j.Spec.Template.Spec.Containers, *engine(j).DeepCopy())
		}, []string{
			`FieldValueDuplicate spec.template.spec.containers[1].name: Duplicate value: "engine"`,
		}},
		{"requests above limits", func(j *batchv1.Job) {
			engine(j).Resources.Requests[corev1.ResourceMemory] = resource.MustParse("8Gi")
		}, []string{
			`FieldValueInvalid spec.template.spec.containers[0].resources.requests: Invalid value: "8Gi": must be less than or equal to memory limit of 4Gi`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := base.DeepCopy()
			tc.break_(job)
			doc, err := json.Marshal(job) // JSON is YAML: the same strict decoder reads it
			if err != nil {
				t.Fatal(err)
			}
			causes, _, _ := create(t, decode(t, doc))
			if !slices.Equal(causes, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", causes, tc.want)
			}
		})
	}
	// And the unbroken Job passes, so each failure is the breakage's.
	if causes, _, _ := create(t, base.DeepCopy()); len(causes) > 0 {
		t.Errorf("the unbroken Job fails: %q", causes)
	}
}

// TestStrictDecodingFails: the decoder refuses what a lenient one accepts,
// and an object returned beside the error is not taken as success.
func TestStrictDecodingFails(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec: {backofLimit: 0}\n",
		"duplicate key": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b, a: c}\n",
		"type error":    "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec: {backoffLimit: \"0\"}\n",
	} {
		obj, _, err := strict.Decode([]byte(doc), nil, nil)
		if err == nil {
			t.Errorf("%s: decoded %T without an error", name, obj)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestGatewaySecretOnlyInTheSidecar: with a model gateway, the Secret is
// referenced by the egress-proxy sidecar alone, never by the engine.
func TestGatewaySecretOnlyInTheSidecar(t *testing.T) {
	_, data := renderExample(t, "gateway", nil)
	var checked bool
	for _, doc := range splitDocuments(t, data) {
		job, ok := decode(t, doc).(*batchv1.Job)
		if !ok {
			continue
		}
		pod := job.Spec.Template.Spec
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			for _, e := range c.Env {
				ref := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
				switch {
				case c.Name == k8s.ProxyContainer && e.Name == "ANTHROPIC_API_KEY":
					checked = ref
				case ref:
					t.Errorf("container %s references secret key %s", c.Name, e.ValueFrom.SecretKeyRef.Key)
				case c.Name == k8s.EngineContainer && e.Name == "ANTHROPIC_API_KEY" && e.Value != "hookbox-gateway-placeholder":
					t.Errorf("the engine's ANTHROPIC_API_KEY is %q, want the placeholder", e.Value)
				}
			}
		}
	}
	if !checked {
		t.Errorf("the egress-proxy sidecar does not get ANTHROPIC_API_KEY from the Secret")
	}
}

package k8s

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestAgent(t *testing.T) {
	img := "hookbox.dev/proxy@sha256:" + strings.Repeat("0", 64)
	objs, err := Agent(AgentOptions{Image: img, Namespace: "hookbox-system", JobNamespaces: []string{"ci", "review", "ci"}, NRISocket: "/run/hookbox-cluster/nri.sock"})
	if err != nil {
		t.Fatal(err)
	}
	// Least privilege: ConfigMaps only, get/create/update, bound per namespace.
	if len(objs.ClusterRole.Rules) != 1 || !slices.Equal(objs.ClusterRole.Rules[0].Resources, []string{"configmaps"}) ||
		!slices.Equal(objs.ClusterRole.Rules[0].Verbs, []string{"get", "create", "update"}) {
		t.Fatalf("role: %+v", objs.ClusterRole.Rules)
	}
	var bound []string
	for _, rb := range objs.RoleBindings {
		bound = append(bound, rb.Namespace)
	}
	if !slices.Equal(bound, []string{"ci", "review"}) {
		t.Fatalf("bindings in %v", bound)
	}
	c := objs.DaemonSet.Spec.Template.Spec.Containers[0]
	if *c.SecurityContext.Privileged || !slices.Contains(c.Command, "--node") || c.VolumeMounts[0].MountPath != "/run/hookbox-cluster" {
		t.Fatalf("container: %+v", c)
	}
	if _, err := objs.Marshal(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []AgentOptions{
		{Image: "hookbox:latest", Namespace: "a", JobNamespaces: []string{"ci"}},
		{Image: img, Namespace: "a"},
		{Image: img, Namespace: "a", JobNamespaces: []string{"Not_A_Namespace"}},
	} {
		if _, err := Agent(o); !errors.Is(err, ErrOptions) {
			t.Errorf("Agent(%+v) = %v, want ErrOptions", o, err)
		}
	}
}

func TestPinnedRef(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("a", 64)
	for ref, want := range map[string]bool{
		"hookbox.dev/proxy" + digest:                  true,
		"localhost:5000/a/b:tag" + digest:             true,
		digest:                                        false, // no name
		"hookbox.dev/proxy":                           false, // not pinned
		"hookbox.dev/proxy@sha256:abc":                false,
		"a b" + digest:                                false,
		"a\tb" + digest:                               false,
		"a@b" + digest:                                false,
		"hookbox.dev/proxy" + digest + "0":            false,
		"hookbox.dev/proxy" + strings.ToUpper(digest): false,
	} {
		if pinnedRef(ref) != want {
			t.Errorf("pinnedRef(%q) = %v, want %v", ref, !want, want)
		}
	}
}

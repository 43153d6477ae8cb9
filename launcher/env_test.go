package launcher

import (
	"bytes"
	"context"
	"maps"
	"testing"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/initsecrets"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/render"
)

// Host values go to the spec, container secrets to hookbox-init's stream
// in the render's order, a gateway's secret to the host side only: no
// value is in two places.
func TestResolveEnvSplitsTheValues(t *testing.T) {
	t.Setenv("HBX_HOST", "host-value")
	t.Setenv("HBX_B", "b-value")
	t.Setenv("HBX_A", "a-value")
	t.Setenv("HBX_GATEWAY", "gateway-value")
	r := &render.Render{
		Process: render.Process{Env: []render.EnvVar{
			{Name: "HBX_B", Source: render.EnvSecret},
			{Name: "HBX_HOST", Source: render.EnvHost},
			{Name: "HBX_A", Source: render.EnvSecret},
			{Name: "HBX_GATEWAY", Source: render.EnvSet, Value: "placeholder"},
		}},
		Gateways: []render.Gateway{{Kind: "anthropic", Secret: "HBX_GATEWAY"}},
	}
	host, stream, credentials, _, err := resolveEnv(context.Background(), r, secretsconf.Lookup{State: secretsconf.NotConfigured}, cgroup.NoHelpers("test"), "hbx-test")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(host, map[string]string{"HBX_HOST": "host-value"}) {
		t.Errorf("host %q", host)
	}
	if !maps.Equal(credentials, map[string]string{"HBX_GATEWAY": "gateway-value"}) {
		t.Errorf("credentials %q", credentials)
	}
	if want := "HBX_B=b-value\x00HBX_A=a-value\x00"; string(stream) != want {
		t.Errorf("stream %q, want %q", stream, want)
	}
	if _, err := initsecrets.Read(bytes.NewReader(stream), []string{"HBX_B", "HBX_A"}); err != nil {
		t.Error(err)
	}

	// Without container secrets there is no stream: the task gets no stdin.
	r.Process.Env = r.Process.Env[1:2]
	if _, stream, _, _, err := resolveEnv(context.Background(), r, secretsconf.Lookup{State: secretsconf.NotConfigured}, cgroup.NoHelpers("test"), "hbx-test"); err != nil || stream != nil {
		t.Errorf("stream %q err %v, want none", stream, err)
	}
}

package compiler

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// allowSpec is a claude spawn whose network.allow holds entries, one per
// line from line 10 on, each at column 9.
func allowSpec(entries ...string) string {
	lines := []string{"  prompt: x", "  network:", "    allow:"}
	for _, e := range entries {
		lines = append(lines, "      - "+strconv.Quote(e))
	}
	return spawnYAML("{kind: claude, path: /opt/c}", lines...)
}

func specDiagnostics(t *testing.T, spec string) []Diagnostic {
	t.Helper()
	_, err := tryCompile(spec)
	var specErr *SpecError
	if !errors.As(err, &specErr) {
		t.Fatalf("want a spec error, got %v for\n%s", err, spec)
	}
	return specErr.Diagnostics
}

// wantDiagnostic checks that the only problem is at path and line:col and
// mentions text (in the message or the hint).
func wantDiagnostic(t *testing.T, spec, path string, line, col int, text string) {
	t.Helper()
	diags := specDiagnostics(t, spec)
	if len(diags) != 1 {
		t.Fatalf("want one diagnostic, got %d: %v", len(diags), diags)
	}
	d := diags[0]
	if d.Path != path || d.Pos != (Pos{Line: line, Column: col}) || !strings.Contains(d.Message+"; "+d.Hint, text) {
		t.Errorf("got %s\nwant %s at %d:%d mentioning %q", d, path, line, col, text)
	}
}

func TestAllowEntriesAccepted(t *testing.T) {
	for entry, want := range map[string]render.Destination{
		"api.example.com":           {Host: "api.example.com", Port: 443, Kind: render.DestName},
		"API.Example.COM.:8443":     {Host: "api.example.com", Port: 8443, Kind: render.DestName},
		"proxy:3128":                {Host: "proxy", Port: 3128, Kind: render.DestName},
		"xn--bcher-kva.example":     {Host: "xn--bcher-kva.example", Port: 443, Kind: render.DestName},
		"*.example.com:443":         {Host: "*.example.com", Port: 443, Kind: render.DestWildcard},
		"*.Example.com":             {Host: "*.example.com", Port: 443, Kind: render.DestWildcard},
		"10.1.2.3:8080":             {Host: "10.1.2.3", Port: 8080, Kind: render.DestIP},
		"10.1.2.3":                  {Host: "10.1.2.3", Port: 443, Kind: render.DestIP},
		"[fd00::1]:443":             {Host: "fd00::1", Port: 443, Kind: render.DestIP},
		"[FD00:0::1]":               {Host: "fd00::1", Port: 443, Kind: render.DestIP},
		"[::ffff:10.1.2.3]:80":      {Host: "10.1.2.3", Port: 80, Kind: render.DestIP},
		"a-b.c-d.example.com:65535": {Host: "a-b.c-d.example.com", Port: 65535, Kind: render.DestName},
	} {
		r := compileSpec(t, allowSpec(entry))
		want.Source = render.SourceSpec
		if len(r.Egress.Allow) != 1 || r.Egress.Allow[0] != want {
			t.Errorf("%q: got %+v, want %+v", entry, r.Egress.Allow, want)
		}
		if r.Network != render.NetworkAllowlist || r.Egress.ProxyAddress != render.ProxyAddress {
			t.Errorf("%q: network %q, proxy %q", entry, r.Network, r.Egress.ProxyAddress)
		}
	}
}

// TestAllowEntriesRefused: each bad form is one diagnostic at the entry
// (the second one, on line 11, column 9).
func TestAllowEntriesRefused(t *testing.T) {
	for entry, text := range map[string]string{
		"":                                       "empty entry",
		"https://api.example.com":                "write api.example.com",
		"http://10.1.2.3:8080/v1":                "has a scheme",
		"api.example.com/v1":                     "has a path",
		"api.example.com?x":                      "has a path",
		"user@api.example.com":                   "user information",
		" api.example.com":                       "whitespace",
		":443":                                   "has no host",
		"api.example.com:":                       "empty port",
		"api.example.com:0":                      "out of range",
		"api.example.com:65536":                  "out of range",
		"api.example.com:123456":                 "not a number",
		"api.example.com:https":                  "not a number",
		"api.example.com:-1":                     "not a number",
		"*":                                      "allows every host",
		"*:443":                                  "allows every host",
		"a.*.example.com":                        "wildcard inside the name",
		"*foo.example.com":                       "wildcard inside the name",
		"*.*.example.com":                        "more than one wildcard",
		"*.com":                                  "top-level domain",
		"*.com.":                                 "top-level domain",
		"fd00::1":                                "in brackets",
		"[10.1.2.3]:443":                         "not an IPv6 address",
		"[fd00::1":                               "unclosed",
		"[fd00::1]443":                           "text after ]",
		"[fe80::1%eth0]:443":                     "zone",
		"127.0.0.1:80":                           "loopback",
		"127.9.9.9":                              "loopback",
		"[::1]:443":                              "loopback",
		"[::ffff:127.0.0.1]":                     "loopback",
		"localhost:8080":                         "loopback",
		"api.localhost":                          "loopback",
		"0.0.0.0":                                "unspecified",
		"[::]:443":                               "unspecified",
		"224.0.0.1":                              "multicast",
		"bücher.example":                         "write xn--bcher-kva.example",
		"10.1.2":                                 "neither a host name nor an IP address",
		"127.1":                                  "neither a host name nor an IP address",
		"-a.example.com":                         "cannot start or end with '-'",
		"a_b.example.com":                        "not a host name",
		"a..example.com":                         "empty label",
		strings.Repeat("a", 64) + ".example.com": "longer than 63",
		"model-api:443":                          "shorthand model-api",
		"MODEL-API":                              "shorthand model-api",
	} {
		t.Run(entry, func(t *testing.T) {
			wantDiagnostic(t, allowSpec("api.example.com", entry), "spec.network.allow[1]", 11, 9, text)
		})
	}
}

func TestAllowDuplicateEntry(t *testing.T) {
	wantDiagnostic(t, allowSpec("api.example.com", "API.example.com:443"), "spec.network.allow[1]", 11, 9, "already allowed by spec.network.allow[0]")
}

func TestNetworkShapes(t *testing.T) {
	engine := "{kind: claude, path: /opt/c}"
	for name, tc := range map[string]struct {
		lines     []string
		path      string
		line, col int
		text      string
	}{
		"other string": {[]string{"  network: host"}, "spec.network", 8, 12, `network "host" is not supported`},
		"number":       {[]string{"  network: 5"}, "spec.network", 8, 12, "expected none or a mapping"},
		"empty map":    {[]string{"  network: {}"}, "spec.network", 8, 12, "no allow list"},
		"empty allow":  {[]string{"  network: {allow: []}"}, "spec.network.allow", 8, 20, "write network: none"},
		"unknown key":  {[]string{"  network: {allow: [a.example.com], deny: [b.example.com]}"}, "spec.network.deny", 8, 37, `unknown field "deny"`},
		"allow string": {[]string{"  network: {allow: a.example.com}"}, "spec.network.allow", 8, 20, "expected a list"},
		"entry number": {[]string{"  network: {allow: [443]}"}, "spec.network.allow[0]", 8, 21, "expected a string"},
		"null allow":   {[]string{"  network: {allow: null}"}, "spec.network.allow", 8, 20, "null is ambiguous"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := spawnYAML(engine, append([]string{"  prompt: x"}, tc.lines...)...)
			wantDiagnostic(t, spec, tc.path, tc.line, tc.col, tc.text)
		})
	}
	for _, spec := range []string{
		spawnYAML(engine, "  prompt: x"),
		spawnYAML(engine, "  prompt: x", "  network: none"),
	} {
		if r := compileSpec(t, spec); r.Network != render.NetworkNone || r.Egress != nil {
			t.Errorf("network %q, egress %+v", r.Network, r.Egress)
		}
	}
}

func TestModelAPIPerEngine(t *testing.T) {
	for name, tc := range map[string]struct {
		engine string
		lines  []string
		want   string // host:port, or "" for the error
	}{
		"claude":       {"{kind: claude, path: /opt/c}", []string{"  prompt: x"}, "api.anthropic.com:443"},
		"codex":        {"{kind: codex, path: /opt/c}", []string{"  prompt: x"}, "api.openai.com:443"},
		"gemini":       {"{kind: gemini, path: /opt/g}", []string{"  prompt: x"}, "generativelanguage.googleapis.com:443"},
		"pi anthropic": {"{kind: pi, path: /opt/p, model: claude-sonnet-4-5}", []string{"  prompt: x"}, "api.anthropic.com:443"},
		"pi openai":    {"{kind: pi, path: /opt/p, model: gpt-5}", []string{"  prompt: x"}, "api.openai.com:443"},
		"pi google":    {"{kind: pi, path: /opt/p, model: gemini-2.5-pro}", []string{"  prompt: x"}, "generativelanguage.googleapis.com:443"},
		"pi explicit":  {"{kind: pi, path: /opt/p, model: mistral/devstral-medium}", []string{"  prompt: x"}, "api.mistral.ai:443"},
		"pi unknown":   {"{kind: pi, path: /opt/p, model: openrouter/auto}", []string{"  prompt: x"}, ""},
		"pi no model":  {"{kind: pi, path: /opt/p}", []string{"  prompt: x"}, ""},
		"exec":         {"{kind: exec, path: /opt/e}", nil, ""},
		"scripted":     {"{kind: scripted, path: /opt/s, script: [{exit: 0}]}", nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			lines := append(tc.lines, "  network: {allow: [model-api]}")
			spec := spawnYAML(tc.engine, lines...)
			if tc.want == "" {
				line := 6 + len(lines)
				wantDiagnostic(t, spec, "spec.network.allow[0]", line, 21, "model-api needs an engine with a known provider")
				return
			}
			r := compileSpec(t, spec)
			if len(r.Egress.Allow) != 1 || r.Egress.Allow[0].Address() != tc.want || r.Egress.Allow[0].Source != render.SourceModelAPI {
				t.Errorf("got %+v, want %s from model-api", r.Egress.Allow, tc.want)
			}
		})
	}
}

// TestModelAPIHostsParse: every engine's model-api hosts are valid entries.
func TestModelAPIHostsParse(t *testing.T) {
	specs := []*SpawnSpec{{}}
	for _, p := range piProviders {
		specs = append(specs, &SpawnSpec{Engine: Engine{Model: p.prefix + "x"}})
	}
	for kind, def := range engines {
		if def.modelAPI == nil {
			continue
		}
		for _, s := range specs {
			for _, h := range def.modelAPI(s) {
				if _, err := parseDestination(h); err != nil {
					t.Errorf("engine %s: %q: %v", kind, h, err)
				}
			}
		}
	}
}

func TestMCPHostsAreAllowed(t *testing.T) {
	r := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x",
		"  mcpServers:",
		"    docs: {url: https://MCP.example.com/mcp}",
		"    alt: {url: 'http://10.0.0.5:8080/'}",
		"    same: {url: 'https://mcp.example.com:443/other'}",
		"    local: {url: 'http://127.0.0.1:9000/mcp'}",
		"    tools: {command: [/opt/tools-mcp]}",
		"  network: {allow: [model-api]}"))
	var got []string
	for _, d := range r.Egress.Allow {
		got = append(got, d.Address()+" "+d.Kind+" "+d.Source)
	}
	want := "10.0.0.5:8080 ip mcp:alt|api.anthropic.com:443 name model-api|mcp.example.com:443 name mcp:docs"
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}

	// The spec's own entry for an MCP host wins (spec before mcp).
	r = compileSpec(t, spawnYAML("{kind: codex, path: /opt/c}", "  prompt: x",
		"  mcpServers: {docs: {url: 'https://mcp.example.com/mcp'}}",
		"  network: {allow: [mcp.example.com]}"))
	if len(r.Egress.Allow) != 1 || r.Egress.Allow[0].Source != render.SourceSpec {
		t.Errorf("got %+v", r.Egress.Allow)
	}

	wantDiagnostic(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x",
		"  mcpServers:",
		"    bad: {url: 'ftp://files.example.com/'}",
		"  network: {allow: [model-api]}"),
		"spec.mcpServers.bad.url", 9, 16, "not an http or https URL")
	// Under network none an MCP URL is not interpreted (as before).
	compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  mcpServers: {bad: {url: 'ftp://x/'}}"))
}

func TestBaseURLMustBeAllowed(t *testing.T) {
	spec := func(engine, env, allow string) string {
		return spawnYAML(engine, "  prompt: x", "  env:", "    "+env, "  network: {allow: ["+allow+"]}")
	}
	claude := "{kind: claude, path: /opt/c}"
	wantDiagnostic(t, spec(claude, "set: {ANTHROPIC_BASE_URL: 'https://gw.example.net/v1'}", "model-api"),
		"spec.env.set.ANTHROPIC_BASE_URL", 9, 31, `add "gw.example.net:443" to spec.network.allow`)
	wantDiagnostic(t, spec(claude, "set: {ANTHROPIC_BASE_URL: 'http://10.1.2.3:8080'}", "10.1.2.3"),
		"spec.env.set.ANTHROPIC_BASE_URL", 9, 31, `add "10.1.2.3:8080"`)
	wantDiagnostic(t, spec(claude, "set: {ANTHROPIC_BASE_URL: 'gw.example.net'}", "model-api"),
		"spec.env.set.ANTHROPIC_BASE_URL", 9, 31, "not an http or https URL")
	wantDiagnostic(t, spec(claude, "allow: [ANTHROPIC_BASE_URL]", "model-api"),
		"spec.env.allow[0]", 9, 13, "cannot be checked against the allowlist")
	wantDiagnostic(t, spec("{kind: gemini, path: /opt/g}", "set: {GOOGLE_GEMINI_BASE_URL: 'https://gw.example.net'}", "model-api"),
		"spec.env.set.GOOGLE_GEMINI_BASE_URL", 9, 35, `add "gw.example.net:443"`)

	for name, s := range map[string]string{
		"named":              spec(claude, "set: {ANTHROPIC_BASE_URL: 'https://gw.example.net/v1'}", "model-api, gw.example.net"),
		"wildcard":           spec(claude, "set: {ANTHROPIC_BASE_URL: 'https://GW.example.net.'}", "'*.example.net'"),
		"ip":                 spec(claude, "set: {ANTHROPIC_BASE_URL: 'http://10.1.2.3:8080'}", "'10.1.2.3:8080'"),
		"ipv6":               spec(claude, "set: {ANTHROPIC_BASE_URL: 'https://[fd00::1]'}", "'[fd00::1]:443'"),
		"loopback is direct": spec(claude, "set: {ANTHROPIC_BASE_URL: 'http://127.0.0.1:8080'}", "model-api"),
		"pi reads none":      spec("{kind: pi, path: /opt/p, model: claude-sonnet-4-5}", "set: {ANTHROPIC_BASE_URL: 'https://gw.example.net'}", "model-api"),
		"network none":       spawnYAML(claude, "  prompt: x", "  env: {set: {ANTHROPIC_BASE_URL: 'https://gw.example.net'}}"),
	} {
		if _, err := tryCompile(s); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestProxyEnvironment(t *testing.T) {
	r := compileSpec(t, allowSpec("api.example.com"))
	want := map[string]string{
		"HTTPS_PROXY": "http://127.0.0.1:3128", "HTTP_PROXY": "http://127.0.0.1:3128",
		"https_proxy": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
	}
	for name, value := range want {
		if got := envValue(r, name); got != value {
			t.Errorf("%s = %q, want %q", name, got, value)
		}
	}
	for _, e := range r.Process.Env {
		if _, ok := want[e.Name]; ok && e.Source != render.EnvHookbox {
			t.Errorf("%s has source %s", e.Name, e.Source)
		}
	}
	none := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x"))
	for _, e := range none.Process.Env {
		if strings.Contains(strings.ToLower(e.Name), "proxy") {
			t.Errorf("network none sets %s", e.Name)
		}
	}

	for _, lines := range [][]string{
		{"  env: {set: {HTTPS_PROXY: 'http://elsewhere:8080'}}"},
		{"  env: {allow: [no_proxy]}"},
		{"  secrets: [ALL_PROXY]"},
	} {
		spec := spawnYAML("{kind: claude, path: /opt/c}", append([]string{"  prompt: x", "  network: {allow: [model-api]}"}, lines...)...)
		diags := specDiagnostics(t, spec)
		if len(diags) != 1 || !strings.Contains(diags[0].Message, "reserved for an allowlist network") {
			t.Errorf("%s: %v", lines[0], diags)
		}
		// With network none they are the spec's own business.
		compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", append([]string{"  prompt: x"}, lines...)...))
	}
}

func TestEgressDigest(t *testing.T) {
	withAllow := func(allow string) string {
		return strings.Replace(digestBase, "  network: none\n", "  network:\n    allow: "+allow+"\n", 1)
	}
	base := digestOf(t, withAllow("[model-api, api.example.com, '*.example.org:8443', '10.1.2.3']"))
	for name, allow := range map[string]string{
		"order":      "['10.1.2.3', '*.example.org:8443', api.example.com, model-api]",
		"normalised": "[model-api, API.example.com., '*.Example.org:8443', '10.1.2.3:443']",
	} {
		if digestOf(t, withAllow(allow)) != base {
			t.Errorf("%s changed the digest", name)
		}
	}
	for name, spec := range map[string]string{
		"one more":   withAllow("[model-api, api.example.com, '*.example.org:8443', '10.1.2.3', b.example.com]"),
		"other port": withAllow("[model-api, api.example.com, '*.example.org:8444', '10.1.2.3']"),
		// The same destinations, but api.anthropic.com's source is now spec.
		"source":       withAllow("[api.anthropic.com, model-api, api.example.com, '*.example.org:8443', '10.1.2.3']"),
		"network none": digestBase,
	} {
		if digestOf(t, spec) == base {
			t.Errorf("%s: same digest", name)
		}
	}
}

// FuzzParseDestination: the entry parser never panics, and what it accepts
// is normalised: parsing its address again gives the same destination, which
// matches its own host and port.
func FuzzParseDestination(f *testing.F) {
	for _, seed := range []string{
		"api.example.com", "API.example.com.:8443", "*.example.com:443", "10.1.2.3:8080", "[fd00::1]:443",
		"[::ffff:10.1.2.3]", "https://x/", "*.com", "a.*.b", "*", "bücher.example", "[fe80::1%eth0]:1",
		"127.1", "x:65536", "[", "]:", ":", "model-api", "a..b", "0x7f.1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		d, err := parseDestination(entry)
		if err != nil {
			var refused *entryError
			if !errors.As(err, &refused) || refused.problem == "" {
				t.Fatalf("%q: refusal without a problem: %v", entry, err)
			}
			return
		}
		if d.Port < 1 || d.Port > 65535 || d.Host != strings.ToLower(d.Host) {
			t.Fatalf("%q: not normalised: %+v", entry, d)
		}
		again, err := parseDestination(d.Address())
		if err != nil || again != d {
			t.Fatalf("%q: %s parses as %+v, %v; want %+v", entry, d.Address(), again, err, d)
		}
		if d.Kind != render.DestWildcard && !d.Matches(d.Host, d.Port) {
			t.Fatalf("%q: %+v does not match itself", entry, d)
		}
	})
}

package render

import (
	"fmt"
	"slices"
	"strings"

	"hookbox.dev/hookbox/internal/shellwords"
)

// Text is a human view of the render with its digests. It is for reading,
// not parsing: use the canonical JSON for machines.
func (r *Render) Text(d Digests) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("spawn %s", r.Spawn)
	line("  plan digest     %s", d.Plan)
	if d.Content != "" {
		line("  content digest  %s", d.Content)
	} else {
		line("  content digest  not computed: the runfiles are not assembled (--runfiles)")
	}
	if r.BaseDir != "" {
		line("  base dir %s (paths under it are relative in the plan digest)", r.BaseDir)
	}
	engine := r.Engine.Kind
	if r.Engine.Model != "" {
		engine += "  model " + r.Engine.Model
	}
	if r.Engine.Effort != "" || r.Engine.RequestedEffort != "" {
		engine += fmt.Sprintf("  effort %s", r.Engine.Effort)
		if r.Engine.RequestedEffort != r.Engine.Effort {
			engine += fmt.Sprintf(" (asked %s)", r.Engine.RequestedEffort)
		}
	}
	line("  engine   %s", engine)
	if r.Engine.Profile != "" {
		version := r.Engine.Version
		if version == "" {
			version = "unknown"
		}
		line("  profile  %s %s (engine version %s)", r.Engine.Kind, r.Engine.Profile, version)
	}
	for _, x := range r.Engine.Execs {
		argv := make([]string, len(x.Argv))
		for i, a := range x.Argv {
			argv[i] = shellwords.Quote(a)
			if slices.Contains(x.Slots, i) {
				argv[i] = "<any>"
			}
		}
		rest := ""
		if x.Rest {
			rest = " …"
		}
		line("    exec %-12s %s  argv %s%s  (binary: %s)", x.Name, x.Path, strings.Join(argv, " "), rest, x.Binary)
	}
	if r.Init != nil {
		line("  init     %s, then the engine as its child", r.Init.Path)
	}
	line("  exec     %s", shellwords.Join(r.Process.Argv))
	line("  cwd      %s   stdin %s   user %d:%d", r.Process.Cwd, r.Process.Stdin, r.Process.UID, r.Process.GID)
	line("  env")
	for _, e := range r.Process.Env {
		switch e.Source {
		case EnvSecret:
			line("    %s  <secret, resolved at launch>", e.Name)
		case EnvHost:
			line("    %s  <copied from the host at launch>", e.Name)
		default:
			line("    %s=%s", e.Name, shellwords.Quote(e.Value))
		}
	}
	line("  programs")
	for _, p := range r.Programs {
		script := ""
		if sb := p.Shebang; sb != nil {
			script = "  #!" + sb.Interpreter
			if sb.Arg != "" {
				script += " " + sb.Arg
			}
			if sb.Hop != "" {
				script += " → " + sb.Hop
			}
		}
		line("    %-40s %s%s", p.Path, strings.Join(p.Roles, ","), script)
	}
	if len(r.Hooks) > 0 {
		line("  hooks")
		for _, h := range r.Hooks {
			when := h.Event
			if h.Matcher != "" {
				when += "(" + h.Matcher + ")"
			}
			req := ""
			if h.Required {
				req = "  required"
			}
			line("    %s on %s%s", h.Name, when, req)
			for _, e := range h.Chain {
				line("      exec %s  argv %s", e.Path, shellwords.Join(e.Argv))
			}
		}
	}
	if len(r.Files) > 0 {
		line("  files")
		for _, f := range r.Files {
			line("    %s (%04o, %d bytes)", f.Path, f.Mode, len(f.Content))
		}
	}
	line("  mounts")
	for _, m := range r.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		src := m.Source
		if m.Kind == MountTmpfs {
			src = fmt.Sprintf("tmpfs %s", formatBytes(m.SizeBytes))
			if m.Inodes > 0 {
				src += fmt.Sprintf(" %d inodes", m.Inodes)
			}
		}
		line("    %-24s %s %s %s", m.Destination, mode, src, strings.Join(m.Options, ","))
	}
	l := r.Limits
	limits := fmt.Sprintf("timeout %s", formatMS(l.TimeoutMS))
	if l.FirstOutputMS > 0 {
		limits += "  first-output " + formatMS(l.FirstOutputMS)
	}
	if l.IdleMS > 0 {
		limits += "  idle " + formatMS(l.IdleMS)
	}
	limits += fmt.Sprintf("  memory %s  pids %d", formatBytes(l.MemoryBytes), l.Pids)
	if l.MilliCPUs > 0 {
		limits += fmt.Sprintf("  cpus %dm", l.MilliCPUs)
	}
	if l.OutputBytes > 0 {
		limits += fmt.Sprintf("  output %s per stream", formatBytes(l.OutputBytes))
	}
	line("  limits   %s", limits)
	if r.Egress == nil {
		line("  network  %s", r.Network)
	} else {
		line("  network  %s  through the proxy at %s, to", r.Network, r.Egress.ProxyAddress)
		for _, d := range r.Egress.Allow {
			line("    %-40s %-8s %s", d.Address(), d.Kind, d.Source)
		}
	}
	line("  trace    %s  allow [%s]", r.Trace.Mode, strings.Join(r.Trace.Allow, " "))
	if len(r.Artifacts) > 0 {
		line("  artifacts %s", strings.Join(r.Artifacts, " "))
	}
	for _, n := range r.Notes {
		line("  note     %s", n)
	}
	return b.String()
}

func formatMS(ms int64) string {
	switch {
	case ms%3600000 == 0:
		return fmt.Sprintf("%dh", ms/3600000)
	case ms%60000 == 0:
		return fmt.Sprintf("%dm", ms/60000)
	case ms%1000 == 0:
		return fmt.Sprintf("%ds", ms/1000)
	}
	return fmt.Sprintf("%dms", ms)
}

func formatBytes(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.unit)
		}
	}
	return fmt.Sprintf("%dB", n)
}

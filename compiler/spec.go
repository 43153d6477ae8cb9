package compiler

import (
	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/config/notifyconf"
)

// The spawn spec as users write it (YAML or JSON). Field names here are the
// spec's field names (json tags); `doc` tags feed `hookbox schema`, and
// `enum` tags list the accepted values of closed vocabularies.
//
// Pointer fields distinguish "absent" from "explicitly empty" where the two
// mean different things (mcpServers, trace.allow).

const (
	APIVersion    = "hookbox.dev/v1alpha1"
	KindSpawn     = "Spawn"
	KindSpawnList = "SpawnList"
)

// Spawn is one `kind: Spawn` document.
type Spawn struct {
	APIVersion string    `json:"apiVersion" doc:"Always hookbox.dev/v1alpha1." enum:"hookbox.dev/v1alpha1"`
	Kind       string    `json:"kind" doc:"Spawn for one spawn; SpawnList holds several under items." enum:"Spawn"`
	Params     Params    `json:"params,omitempty" doc:"Template slots by name (lowercase letters, digits, _), filled by hookbox render --set NAME=VALUE. A value whose whole text is \"{{ NAME }}\" (quoted) becomes the param's value, as a string; a slot inside a longer string is an error. {} declares a required param, {default: VALUE} an optional one."`
	Metadata   Metadata  `json:"metadata"`
	Spec       SpawnSpec `json:"spec"`
}

// SpawnList is a `kind: SpawnList` document.
type SpawnList struct {
	APIVersion string      `json:"apiVersion" enum:"hookbox.dev/v1alpha1"`
	Kind       string      `json:"kind" enum:"SpawnList"`
	Params     Params      `json:"params,omitempty" doc:"Template slots of every item, by name (lowercase letters, digits, _), filled by hookbox render --set NAME=VALUE. A value whose whole text is \"{{ NAME }}\" (quoted) becomes the param's value, as a string; a slot inside a longer string is an error. {} declares a required param, {default: VALUE} an optional one."`
	Items      []SpawnItem `json:"items" doc:"The spawns; names must be unique within the list."`
}

// SpawnItem is one entry of a SpawnList. apiVersion and kind may be repeated
// for readability but must then say hookbox.dev/v1alpha1 and Spawn.
type SpawnItem struct {
	APIVersion string    `json:"apiVersion,omitempty" enum:"hookbox.dev/v1alpha1"`
	Kind       string    `json:"kind,omitempty" enum:"Spawn"`
	Metadata   Metadata  `json:"metadata"`
	Spec       SpawnSpec `json:"spec"`
}

// Params declares template slots by name (lowercase letters, digits, '_').
// A scalar whose whole value is "{{ name }}" (quoted) becomes the param's
// value, as a string; a slot inside a longer string is an error, so a value
// is always a whole field or a whole argv element. See params.go.
type Params map[string]Param

type Metadata struct {
	Name   string            `json:"name" doc:"DNS-1123 label (lowercase letters, digits, '-'; at most 63 characters). Names the container and the Kubernetes Job."`
	Labels map[string]string `json:"labels,omitempty" doc:"Free-form labels for people and tools. Not part of the render, so they never change its digest."`
}

type SpawnSpec struct {
	Engine     Engine                `json:"engine"`
	Prompt     *string               `json:"prompt,omitempty" doc:"The task given to the engine. Exactly one of prompt and promptFile."`
	PromptFile string                `json:"promptFile,omitempty" doc:"A file whose content is the prompt; relative to the spec file."`
	Workspace  Workspace             `json:"workspace" doc:"Host directory mounted at /workspace; relative to the spec file. A string: read-only. {path: DIR, mode: overlay}: the engine may write there; its changes stay in the run's memory, the host directory is never written, and they are harvested as the artifact workspace.patch (git diff --binary format) with workspace.changes.json."`
	AddDirs    []string              `json:"addDirs,omitempty" doc:"Extra host directories granted read-only, mounted at /grants/<basename>."`
	MCPServers *map[string]MCPServer `json:"mcpServers,omitempty" doc:"MCP servers. Absent: the engine discovers its own. {} (explicitly empty): the engine gets no server at all."`
	Hooks      []Hook                `json:"hooks,omitempty" doc:"Programs the engine runs on its events. At most 128 per spawn: verifying a run compares every exec with the hooks, so more is a spec error."`
	Tools      []string              `json:"tools,omitempty" doc:"Host programs the engine and hooks may run (e.g. /bin/sh, /usr/bin/git): regular files every user of the host may read and execute, never directories. They become read-only runfiles at the same path."`
	Env        Env                   `json:"env,omitempty"`
	Secrets    []Secret              `json:"secrets,omitempty" doc:"Secret environment variables. A name: the value is resolved at launch from the host environment or the lookup command of the user's global config, never appears in the render, and is given to the engine. {name: NAME, gateway: anthropic|openai|gemini[, upstream: https://HOST]}: the value never enters the container; the engine gets a placeholder and its base URL pointed at hookbox's model gateway in its network namespace, which adds the real value on the host side (the upstream is allowed automatically)."`
	Limits     Limits                `json:"limits,omitempty"`
	Network    Network               `json:"network,omitempty" doc:"Network access. none (the default): loopback only. {allow: [ENTRY, ...]}: no route anywhere, and hookbox's proxy connects only to the listed destinations: HOST:PORT (port 443 when omitted), *.example.com:PORT (every name below example.com), an IP address (10.1.2.3:8080, [fd00::1]:443), or model-api (the hosts of the engine's model provider). HTTP MCP servers' hosts are added."`
	Artifacts  []string              `json:"artifacts,omitempty" doc:"Declared outputs, relative to the run dir /run/hookbox. A bare filename matches at the root first, then in an immediate subdirectory; a name ending in / is a directory and matches exactly."`
	Trace      Trace                 `json:"trace,omitempty"`
	Notify     Notify                `json:"notify,omitempty" doc:"Host-side notifier run when the run reaches its terminal result. Overrides the global config's notify block; a --notify flag overrides this. Not part of the render: it never changes the render digest."`
}

type Engine struct {
	Kind    string       `json:"kind" doc:"Which program this spawn runs." enum:"claude,codex,gemini,pi,exec,scripted"`
	Path    string       `json:"path" doc:"Host path of the engine's entry binary (a regular file every user of the host may read and execute); relative to the spec file."`
	Model   string       `json:"model,omitempty"`
	Effort  string       `json:"effort,omitempty" doc:"Reasoning effort, case-insensitive: none, minimal, low, medium, high, xhigh, max or ultra; clamped per engine and model."`
	BaseURL string       `json:"baseURL,omitempty" doc:"Where the engine sends its model requests instead of its provider's API, in the form its own setting takes: claude ANTHROPIC_BASE_URL (http://HOST:PORT, no /v1), codex a Responses API provider base_url (with /v1; the key is OPENAI_API_KEY), gemini GOOGLE_GEMINI_BASE_URL (no /v1beta; the key is GEMINI_API_KEY), pi the baseUrl of the model's provider in models.json. Under an allowlist, model-api then means this host."`
	Args    []string     `json:"args,omitempty" doc:"Extra arguments appended after the generated flags (claude, codex, gemini, pi) or the whole argv after the binary (exec)."`
	Script  []ScriptStep `json:"script,omitempty" doc:"Steps of the scripted engine (kind scripted only)."`
}

// MCPServer is a stdio server (command) or a remote one (url). env and
// headers may carry credentials, so they never go on an argv.
type MCPServer struct {
	Command []string          `json:"command,omitempty" doc:"argv of a stdio server."`
	URL     string            `json:"url,omitempty" doc:"URL of a streamable-HTTP server."`
	Env     map[string]string `json:"env,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

type Hook struct {
	Name     string   `json:"name" doc:"Unique within the spawn; lowercase letters, digits and '-'."`
	Event    string   `json:"event" doc:"Engine event that runs the hook, e.g. PreToolUse, PostToolUse, Stop, SessionStart."`
	Matcher  string   `json:"matcher,omitempty" doc:"Tool-name matcher for tool events (PreToolUse, PostToolUse)."`
	Argv     Command  `json:"argv" doc:"The hook program and its arguments. A list; a string is accepted only when it splits as POSIX words without shell features."`
	Required bool     `json:"required,omitempty" doc:"Verification expects this hook to run."`
	Timeout  Duration `json:"timeout,omitempty" doc:"Timeout the engine applies to the hook, e.g. 30s."`
}

type Env struct {
	Allow []string          `json:"allow,omitempty" doc:"Host variable names copied into the container at launch (values are never stored in the render)."`
	Set   map[string]string `json:"set,omitempty" doc:"Variables with explicit values. Not for secrets: use secrets."`
}

type Limits struct {
	Timeout     Duration `json:"timeout,omitempty" doc:"Overall wall-clock limit. Default 30m."`
	FirstOutput Duration `json:"firstOutput,omitempty" doc:"Limit until the first output, for engines that stream early (claude, codex). Default 5m."`
	Idle        Duration `json:"idle,omitempty" doc:"Limit between output chunks, for engines that stream early. Default 10m."`
	Memory      Quantity `json:"memory,omitempty" doc:"Memory limit, e.g. 4Gi. Default 4Gi."`
	Pids        int64    `json:"pids,omitempty" doc:"Maximum number of processes. Default 1024."`
	CPUs        Quantity `json:"cpus,omitempty" doc:"CPU limit, e.g. 2 or 500m. Default: no limit."`
	Tmpfs       Quantity `json:"tmpfs,omitempty" doc:"Size of the writable run dir /run/hookbox (and of /tmp). Default 1Gi."`
	TmpfsInodes int64    `json:"tmpfsInodes,omitempty" doc:"How many files, directories and symlinks the run dir (and /tmp, and an overlay workspace's store) can hold; creating one more fails with ENOSPC in the container. Default: one per 16Ki of limits.tmpfs, at least 4096 (65536 for the default 1Gi)."`
	Output      Quantity `json:"output,omitempty" doc:"Cap on the engine's stdout and, separately, on its stderr as hookbox records and streams them, e.g. 16Mi. Beyond it the output is still read (the engine never blocks on it) but dropped and counted (result.json output, reason output-truncated:stdout or :stderr); the record then ends at the last whole line within the cap. Default 64Mi."`
}

type Trace struct {
	Mode  string    `json:"mode,omitempty" doc:"off: no tracer; observe: record execs; verify: record and judge (default); enforce: the kernel stops execs outside the allowed set (refused with EPERM where the BPF LSM is available, else killed)." enum:"off,observe,verify,enforce"`
	Allow *[]string `json:"allow,omitempty" doc:"Programs (from tools) the engine may exec. Absent: every declared tool. []: none."`
}

// ScriptStep is one step of the scripted engine. Exactly one field is set.
type ScriptStep struct {
	Print     any            `json:"print,omitempty" doc:"Print one line on stdout: a string as is, anything else as one line of JSON."`
	Stderr    string         `json:"stderr,omitempty" doc:"Print one line on stderr."`
	Sleep     Duration       `json:"sleep,omitempty"`
	Write     *WriteStep     `json:"write,omitempty" doc:"Write a file under /run/hookbox (or /workspace with workspace mode overlay)."`
	Hook      string         `json:"hook,omitempty" doc:"Fire the event of the named hook the way Claude Code does: every hook of that event runs (exec form: direct exec). For a tool event the hook's matcher is used as the tool name, so write a literal tool name as matcher."`
	Daemonize *DaemonizeStep `json:"daemonize,omitempty" doc:"Start a child that daemonizes (setsid, double fork) and ignores SIGTERM."`
	Allocate  Quantity       `json:"allocate,omitempty" doc:"Allocate and touch this much memory."`
	Fork      *ForkStep      `json:"fork,omitempty" doc:"Fork children that sleep."`
	EnvHash   string         `json:"envHash,omitempty" doc:"Print the sha256 of this environment variable's value (never the value)."`
	Exec      Command        `json:"exec,omitempty" doc:"Run a program (a declared tool) and wait for it."`
	Probe     *ProbeStep     `json:"probe,omitempty" doc:"Print one event describing the sandbox as the engine sees it: argv, environment names (never values), ids, the mounts of paths and whether they are writable, TCP reachability, visible limits."`
	Exit      *int           `json:"exit,omitempty" doc:"Exit now with this code."`
}

type WriteStep struct {
	Path    string `json:"path" doc:"Absolute path under /run/hookbox, or under /workspace with workspace mode overlay."`
	Content string `json:"content"`
}

type ProbeStep struct {
	Paths []string `json:"paths,omitempty" doc:"Absolute container paths to report: exists, writable (a file can be created in a directory), mount point and options."`
	Dial  []string `json:"dial,omitempty" doc:"HOST:PORT addresses to open a TCP connection to (2 s each)."`
}

type DaemonizeStep struct {
	Marker string `json:"marker" doc:"A string the daemon keeps in its argv so tests can find it."`
}

type ForkStep struct {
	Count    int      `json:"count"`
	Sleep    Duration `json:"sleep,omitempty"`
	Allocate Quantity `json:"allocate,omitempty" doc:"Each child allocates and touches this much memory before it sleeps."`
	Wait     bool     `json:"wait,omitempty" doc:"Wait for the children and print how each ended."`
}

// Notify configures the host-side notifier (package notify). It decodes
// itself through notifyconf.ParseNode and never adds a diagnostic: a malformed
// notify block must not fail the run it describes, so it is reported in the
// run's notify outcome instead. The fields below exist for the schema.
type Notify struct {
	Enabled bool         `json:"enabled,omitempty" doc:"false turns notification off. Absent: on when argv is given."`
	Argv    Command      `json:"argv,omitempty" doc:"The notifier and its arguments, run on the host without a shell. An element that is exactly {payload}, {result_path} or {run_id} is replaced by that value; a placeholder inside a longer element is an error. The payload is also on stdin."`
	Timeout Duration     `json:"timeout,omitempty" doc:"Deadline of the notifier. Default 30s, at most 10m."`
	Filter  NotifyFilter `json:"filter,omitempty"`

	setting notifyconf.Setting
}

type NotifyFilter struct {
	Statuses []string `json:"statuses,omitempty" doc:"Notify only runs ending with one of these statuses (completed, completed_empty, failed, timed_out, cancelled, oom_killed, infra_error). Empty: all."`
	Spawns   []string `json:"spawns,omitempty" doc:"Notify only these spawns, by name. Empty: all."`
}

// Setting is the spec layer of the notify configuration.
func (n *Notify) Setting() notifyconf.Setting { return n.setting }

func (n *Notify) decodeNode(d *decoder, node *yaml.Node, path string) {
	n.setting = notifyconf.ParseNode(node, notifyconf.SourceSpec)
}

// NotifySetting returns the spec layer of the notify configuration of the
// named spawn, kept beside the render (never in it).
func NotifySetting(parsed []*Parsed, spawn string) notifyconf.Setting {
	for _, p := range parsed {
		if p.Spawn.Metadata.Name == spawn {
			return p.Spawn.Spec.Notify.Setting()
		}
	}
	return notifyconf.Setting{}
}

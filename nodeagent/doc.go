// Package nodeagent is hookbox's node agent (`hookbox tracer serve
// --node`): it judges every hookbox Job's engine container on its node the
// way a local run is judged, and hands the pipeline a signed verdict.
//
// It is an external NRI plugin (github.com/containerd/nri) of the node's
// containerd. containerd's CRI calls StartContainer on its plugins after
// the task is created (runc init exists, in the container's cgroups,
// blocked before exec of the container's process) and waits for their
// replies before it starts the task; the agent arms the BPF exec tracer on
// the container's cgroup2 id before it replies, so the first exec it
// records is the container's first. A container it could not arm in that
// window (the agent was not connected, the pod's render was refused, no
// cgroup2 directory, the reply came after NRI's request timeout) is judged
// unchecked with the reason, never armed late (docs/node-agent.md).
//
// What it judges with is the launcher's and render/verify's code: the
// render is the pod's ConfigMap render.json, refused unless its sha256 is
// the pod's hookbox.dev/render-sha256 annotation; the identities are the
// runfiles as the container sees them (/proc/<pid>/root of its init,
// launcher.ProgramIdentities); the trace and its stats line are written as
// a run writes trace.jsonl (launcher.TraceStatsLine), and the record is
// judged, sealed and attested by launcher.SealExternal, so hookbox verify
// checks it like any run record. The record goes into the ConfigMap
// hookbox-verdict-<job> of the Job's namespace (VerdictConfigMap).
package nodeagent

// Package k8s turns renders into Kubernetes objects for a review pipeline:
// per spawn one batch/v1 Job, one ConfigMap (the render's canonical JSON and
// its generated files) and one NetworkPolicy (the render's network "none",
// or what a NetworkPolicy can express of its egress allowlist).
// The objects are k8s.io/api values serialized with sigs.k8s.io/yaml; no
// YAML is written by hand.
//
// The Job behaves like `hookbox run` of the same render on a build host:
//
//   - argv: the engine container's command and args are the render's argv,
//     element for element. Every '$' is written as "$$" because the kubelet
//     expands $(VAR) in command, args and env values; after that expansion
//     the process gets exactly the render's strings.
//   - environment: values set by hookbox and the spec are literal; a secret
//     is a secretKeyRef (secret Options.SecretName, key = variable name,
//     required), never a value; an allow-listed host variable is an optional
//     configMapKeyRef (ConfigMap Options.HostEnvConfigMap, key = variable
//     name): the pipeline plays the build host, and an absent key leaves the
//     variable unset, as an unset host variable does.
//   - filesystem: the root filesystem is read-only; programs appear at the
//     render's container paths from an OCI image volume holding the runfiles
//     tree (Options.RunfilesImage, or the spawn's own in
//     Options.RunfilesImages), mounted read-only with one subPath per
//     directory that holds runfiles (see RunfileMounts); the workspace is a
//     PersistentVolumeClaim mounted read-only at /workspace; the run dir and
//     /tmp are memory-backed emptyDirs with the render's size limits; the
//     generated files under /hookbox/etc come from the ConfigMap, read-only.
//     Files the render seeds into the run dir, and the home and out
//     directories, are made before the engine starts by init containers
//     from Options.SeedImage, hookbox's own image of the static
//     hookbox-seed (SeedProgram mkdir / install; argv only, no shell),
//     running as the same unprivileged user.
//   - limits: memory request = limit, CPU request = limit when the render
//     has one, activeDeadlineSeconds from the timeout, backoffLimit 0,
//     restartPolicy Never, a podFailurePolicy that ignores disruptions
//     (eviction, preemption: the pod is replaced) and fails the Job at once
//     on any non-zero engine exit.
//   - identity: user and group 65532, runAsNonRoot, no privilege
//     escalation, every capability dropped, seccomp RuntimeDefault, no
//     service account token, no service links.
//   - egress allowlist: hookbox's proxy runs as a native sidecar
//     (ProxyContainer, Options.ProxyImage) serving the render's allowlist
//     from the ConfigMap's render.json; the NetworkPolicy allows IP entries
//     exactly, the ports of name entries to every public address, and DNS
//     to kube-dns when there are names. With Options.Cilium a
//     CiliumNetworkPolicy allows the names by FQDN instead.
//
// What the cluster does not reproduce is written to the Job's annotation
// hookbox.dev/not-reproduced (pids limit, liveness watchdogs, noexec
// scratch and its inode limit, the output cap, artifact harvest, hook
// launch slots, where the engine can reach an allowlist's ports without
// the proxy) and documented in the README.
//
// Names: the Job, its ConfigMap and NetworkPolicy are named
// <spawn>-<first 12 hex digits of the render digest>, so a changed render
// (another PR number, another ref) never reuses a name, and the same render
// applied twice is the same object. Labels and annotations carry the spawn
// name, the full render digest and the hookbox version, on the Job and on
// its pods, so a node-level tracer can match a pod to its render.
//
// A SpawnList gives one Job per spawn, not one Indexed Job: spawns differ in
// argv, environment, limits and mounts, and an Indexed Job has one pod
// template for all indexes, so it would need a wrapper to pick its argv,
// and the argv that runs would no longer be the render's.
//
// k8s is pure: it reads no files, no environment, no clock and no cluster.
package k8s

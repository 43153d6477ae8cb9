// Package secrets owns the three steps between a spawn spec that names
// secrets and a container environment that holds their values:
//
//   - validating the spec's secret names (CheckNames, ValidName);
//   - reading the secret lookup command from the user's global config file,
//     the only place it may be configured (DefaultConfigPath, LoadLookup,
//     ParseLookup);
//   - resolving values at launch, from the host environment first and from the
//     lookup command otherwise (Resolver).
//
// Guarantees:
//
//   - A secret value is returned to the caller in the map from
//     Resolver.Resolve and nowhere else. It never appears in an error, a
//     Lookup, a log line, a file or any output of this package. A failed
//     lookup is reported by program basename, variable name and exit status
//     only; its stdout is discarded and its stderr is never read.
//   - Refusal is total. One malformed name rejects the whole block of names;
//     a refused lookup configuration yields no argv and is never partially
//     used. A refusal carries a stable Refusal id and a message built only
//     from field names, positions, types and the reason — never from a
//     configured value.
//   - "Not configured" and "disabled" are states, not refusals: they carry no
//     Refusal, so callers can tell them apart from a refused configuration.
//   - A variable already present in the host environment, even with an empty
//     value, is used as-is and is never looked up or overwritten.
//   - The lookup command is an argv list run directly, never through a shell,
//     in its own process group. At the timeout or when the context ends, the
//     whole group is killed with SIGKILL; the group is also killed once the
//     lookup exits, so nothing it started in its group outlives it. The
//     process is always reaped.
//
// What this package does not do: it does not read a project's configuration
// (a repository must never name the program that reads this machine's secret
// store), it does not decide which secrets a spec may name, and it does not
// contain a lookup that escapes its process group (a descendant that calls
// setsid survives; the container's cgroup, not this package, is the
// containment boundary for anything that runs inside a sandbox).
package secrets

// Package secrets resolves the values of the secrets a spawn spec names, at
// launch: from the host environment first, and from the lookup command of
// the global config otherwise (Resolver). The names and the lookup
// configuration are validated below the compiler, in package
// internal/config/secretsconf; this package only runs the lookup.
//
// Guarantees:
//
//   - A secret value is returned to the caller in the map from
//     Resolver.Resolve and nowhere else. It never appears in an error, a
//     log line, a file or any output of this package. A failed lookup is
//     reported by program basename, variable name and exit status only; its
//     stdout is discarded and its stderr is never read.
//   - A refused lookup configuration is never partially used: no name is
//     looked up with it.
//   - A variable already present in the host environment, even with an empty
//     value, is used as-is and is never looked up or overwritten.
//   - The lookup command is an argv list run directly, never through a shell,
//     in its own process group. At the timeout or when the context ends, the
//     whole group is killed with SIGKILL; the group is also killed once the
//     lookup exits, so nothing it started in its group outlives it. The
//     process is always reaped.
//
// What this package does not do: it does not contain a lookup that escapes
// its process group (a descendant that calls setsid survives; the
// container's cgroup, not this package, is the containment boundary for
// anything that runs inside a sandbox).
package secrets

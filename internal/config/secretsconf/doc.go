// Package secretsconf owns the shape of hookbox's secrets configuration,
// below the compiler and free of any process execution:
//
//   - the spec's secret names (CheckNames, ValidName), which the compiler
//     validates;
//   - the secrets block of the global config file, the only place the
//     secret lookup command may be configured (ParseNode, Lookup).
//
// Running the lookup is package secrets'; finding and reading the config
// file is package config's.
//
// Guarantees:
//
//   - Refusal is total. One malformed name rejects the whole block of names;
//     a refused lookup configuration yields no argv and is never partially
//     used. A refusal carries a stable Refusal id and a message built only
//     from field names, positions, types and the reason — never from a
//     configured value.
//   - "Not configured" and "disabled" are states, not refusals: they carry no
//     Refusal, so callers can tell them apart from a refused configuration.
//
// What this package does not do: it does not read a project's configuration
// (a repository must never name the program that reads this machine's secret
// store), and it does not decide which secrets a spec may name.
package secretsconf

package main

// Environment variables the CLI reads itself (docs/cli.md lists every
// variable hookbox reads, with the packages that own the others).
const (
	// envProgress: progress lines go to stderr even when it is not a
	// terminal (any non-empty value).
	envProgress = "HOOKBOX_PROGRESS"
	// envRuntimeDir replaces the runtime directory of the managed
	// containerd (default /run/hookbox, or $XDG_RUNTIME_DIR/hookbox).
	envRuntimeDir = "HOOKBOX_RUNTIME_DIR"
	// envSystemAddress replaces the system socket hookbox probes before
	// starting a managed containerd (unusual hosts, tests).
	envSystemAddress = "HOOKBOX_SYSTEM_CONTAINERD_ADDRESS"
	// envShimGroup: "off" gives every run's task a shim of its own
	// instead of the shim group's (docs/architecture.md, "Shim group").
	envShimGroup = "HOOKBOX_SHIM_GROUP"
)

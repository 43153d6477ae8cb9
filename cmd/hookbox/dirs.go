package main

import (
	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/launcher/rootless"
)

// hostDirs are the directories a command uses. --state-dir S keeps
// everything under S (the run records in S/runs, the runfiles store and the
// managed containerd), as before the split; --cache-dir moves the store.
type hostDirs struct {
	state  string // run records
	cache  string // the runfiles store
	daemon string // the managed containerd's home ("" = config.DataDir())
}

// dirsFrom applies the flags over the defaults: the rootless Context's
// inside RootlessKit's namespaces (chosen outside, where the user is who the
// defaults expect), else this host's (package config).
func dirsFrom(stateFlag, cacheFlag string, inner *rootless.Context) hostDirs {
	d := hostDirs{state: stateFlag, cache: cacheFlag, daemon: stateFlag}
	defState, defCache := config.StateDir, config.CacheDir
	if inner != nil {
		defState = func() string { return inner.StateDir }
		defCache = func() string { return inner.CacheDir }
	}
	if d.cache == "" {
		d.cache = stateFlag
	}
	if d.state == "" {
		d.state = defState()
	}
	if d.cache == "" {
		d.cache = defCache()
	}
	return d
}

// stateDirOr is the run records' directory for commands that only read
// them (ps, logs, verify).
func stateDirOr(flag string) string {
	if flag != "" {
		return flag
	}
	return config.StateDir()
}

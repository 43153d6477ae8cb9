//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"fmt"
	"runtime"
)

var errPlatform = fmt.Errorf("%w: the BPF exec tracer is built for little-endian Linux only (this is %s/%s)", ErrNotSupported, runtime.GOOS, runtime.GOARCH)

// Tracer is unavailable on this platform: Load always fails.
type Tracer struct{}

// Watch is unavailable on this platform.
type Watch struct{}

// Load reports ErrNotSupported on this platform.
func Load(Options) (*Tracer, error) { return nil, errPlatform }

func (*Tracer) Options() Options                     { return Options{} }
func (*Tracer) Close() error                         { return nil }
func (*Tracer) Drain()                               {}
func (*Tracer) Counters() (Counters, error)          { return Counters{}, errPlatform }
func (*Tracer) Orphans() uint64                      { return 0 }
func (*Tracer) Err() error                           { return nil }
func (*Tracer) LSM() error                           { return errPlatform }
func (*Tracer) Watch(uint64, Policy) (*Watch, error) { return nil, errPlatform }
func (*Watch) CgroupID() uint64                      { return 0 }
func (*Watch) Events() <-chan Event                  { return nil }
func (*Watch) Stop() (Stats, error)                  { return Stats{}, errPlatform }

// ObjectsDigest is zero where no BPF objects are embedded.
func ObjectsDigest() [32]byte { return [32]byte{} }

//go:build (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm) && linux

package ebpf

import (
	"crypto/sha256"
	"encoding/binary"
)

// ObjectsDigest is the sha256 of the embedded BPF objects (exec, then
// lsm): two hookbox builds load the same programs exactly when it is
// equal. A long-lived tracer is keyed by it (tracehelper.ManagedKey).
func ObjectsDigest() [sha256.Size]byte {
	h := sha256.New()
	for _, obj := range [][]byte{_ExecBytes, _LsmBytes} {
		// Length-prefixed: where one object ends counts too.
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(obj))))
		h.Write(obj)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

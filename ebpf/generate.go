package ebpf

// The BPF object is compiled with a pinned toolchain (Debian 12: clang-14
// 14.0.6, llvm-strip-14, libbpf-dev 1.1.2 for <bpf/bpf_helpers.h>) and
// committed, so building hookbox never needs clang. With that toolchain the
// output is byte-identical wherever it is built (bpf2go maps the source
// directory out of the debug info).
//
//	make generate      go generate ./ebpf/
//	make vmlinux       bpftool btf dump file /sys/kernel/btf/vmlinux format c > ebpf/bpf/vmlinux.h
//	                   (rarely: CO-RE relocates field offsets at load, so any
//	                   recent kernel's BTF will do; then make generate)
//
// Two objects: exec (bpf/exec.c, the tracepoint programs) and lsm
// (bpf/lsm.c, the BPF LSM programs, loaded only where the BPF LSM is
// active, on exec's maps); bpf/hookbox.h holds what they share.
//
// bpf/generated.sha256 records the hashes of the inputs and of the objects;
// TestGeneratedObjectIsCurrent (no clang needed) fails when a source or
// vmlinux.h changed without a regeneration, or an object was replaced.
// A CI job with the pinned toolchain can also check the bytes:
// go generate ./ebpf/ && git diff --exit-code -- ebpf/
//
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -tags linux -type event -type counter_set -type file_key -type watch exec bpf/exec.c -- -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -tags linux lsm bpf/lsm.c -- -Wall -Werror
//go:generate sh -c "sha256sum bpf/exec.c bpf/lsm.c bpf/hookbox.h bpf/vmlinux.h exec_bpfel.o lsm_bpfel.o > bpf/generated.sha256"

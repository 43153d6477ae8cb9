package ebpf

// The BPF object is compiled with a pinned compiler (clang-14, Debian 12's)
// and committed, so building hookbox never needs clang. `make generate`
// runs `go generate ./ebpf/`; bpf/generated.sha256 records the inputs the
// committed object was built from and TestGeneratedObjectIsCurrent fails
// when they change without a regeneration.
//
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -tags linux -type event -type counter_set -type file_key -type watch exec bpf/exec.c -- -Wall -Werror
//go:generate sh -c "sha256sum bpf/exec.c bpf/vmlinux.h exec_bpfel.o > bpf/generated.sha256"

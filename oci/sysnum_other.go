//go:build !amd64 && !arm64 && !loong64 && !riscv64 && !s390x

package oci

// nativeSyscalls is empty where hookbox has no syscall table (and no
// native-only profile, nativeArch): runc then builds the profile itself.
var nativeSyscalls []syscallNumber

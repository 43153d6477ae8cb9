// Package images owns hookbox's images: the base image (its filesystem
// definition, the two builders that turn that definition into an OCI image,
// an in-process builder that needs no daemon and a BuildKit LLB builder in
// images/buildkit, and importing it into containerd), and the Set of images
// a Kubernetes Job of a render references besides it (render/k8s Options):
// the runfiles image of a spawn's assembled tree, and the program images
// holding hookbox-seed (the seed init containers) and hookbox (the egress
// proxy sidecar). None is built on a third-party image.
//
// The base image carries nothing executable, ever. Every program a spawn can
// run comes from the separately mounted, read-only runfiles, so the set of
// binaries that can run is known before the run. The image holds only the
// identity and name-service files a libc wants (/etc/passwd, /etc/group,
// /etc/nsswitch.conf, /etc/hosts, an empty /etc/resolv.conf), optionally the
// host's CA bundle, and an empty directory for every mount destination: the
// container's rootfs is a read-only snapshot view, which cannot grow
// mountpoints at run time.
//
// Guarantees of [Build]:
//   - the same [Definition] gives byte-identical blobs, so the same manifest
//     digest, on any machine; [NewDefinition] records the build's GOARCH as
//     the platform and takes the CA bundle as input, so the digest differs
//     per architecture and per CA bundle;
//   - every entry is owned by 0:0, has a fixed mode and the fixed
//     modification time [ModTime], and no regular file has an execute bit
//     ([Definition.Validate] refuses one);
//   - the image config names user 65532:65532 (the hookbox user), working
//     directory /workspace and has no entrypoint or command: the render
//     supplies argv.
//
// It does not guarantee that BuildKit produces the same image digest: BuildKit
// writes its own config (history, field order) and manifest annotations. What
// both builders share is the filesystem (paths, types, modes, owners,
// contents, mtimes) and the runtime config, which the BuildKit equivalence
// test checks. (With BuildKit v0.34.2 the layer blob itself came out
// byte-identical; the test reports, but does not require, that.)
//
// Guarantees of a [Set]: every image has one uncompressed layer of
// entries owned by 0:0 with fixed modes and modification times, written
// from its inputs in a fixed order, so a runfiles image's digest follows
// from the runfiles manifest (each file's size and sha256 are checked as it
// is streamed from the tree; one that differs fails the build) and a
// program image's from the program's bytes; the Set's directory and its
// layout tar are private to their owner (0700, and 0600 for the tar the
// CLI writes), because a runfiles layer holds copies of files the host may
// keep from other users.
//
// images never runs anything from an image. containerd is touched only by
// [Import] and [ImportSet], the network only by [Push] (through
// go-containerregistry's remote package, to the registry it is given).
package images

// Package runfiles owns the closure of host programs, the content-addressed
// store their bytes are copied into, and the read-only trees assembled from
// it. It must never decide what is allowed to run: that is the render's job.
// runfiles only makes the declared programs, and everything they need,
// available at their host paths, and says exactly which bytes those are.
//
// # Closure
//
// Closure takes absolute host paths of programs (files or directories) and
// returns every entry the container needs, sorted by path:
//
//   - the program file, with every symlink hop on the way to it recorded as a
//     symlink entry (link text kept verbatim) and every directory traversed
//     recorded as a dir entry, up to but excluding "/";
//   - for ELF files: PT_INTERP, and each DT_NEEDED resolved the way glibc's
//     loader does: DT_RPATH of the object and its loaders (only when the
//     object has no DT_RUNPATH), DT_RUNPATH, /etc/ld.so.cache, then the
//     default directories for the object's class and machine; candidates of
//     another class or machine are skipped; $ORIGIN is expanded; recursively,
//     breadth first, with names already loaded (including the interpreter's
//     soname) not searched again. A missing library is an error naming the
//     program and the library. Not reproduced: LD_LIBRARY_PATH and
//     LD_PRELOAD (the container environment is hookbox's, not the host's),
//     /etc/ld.so.preload, glibc-hwcaps and legacy hwcap subdirectories (the
//     container loader falls back to the plain directory, which is what is
//     included), $LIB and $PLATFORM path elements (skipped), and anything
//     loaded with dlopen (NSS modules, gconv, plugins): declare those.
//     One closure reads each candidate's ELF header once and walks each
//     library path once, whatever number of programs need it: hundreds of
//     declared tools search for the same few libraries (the 808 programs of
//     a Debian /usr/bin: 166-183 ms with a read per search, 38-50 ms so).
//   - /etc/ld.so.cache itself, only when some library was found through the
//     cache where a search without the cache would not find the same path:
//     then the container's loader needs the cache to find it too.
//   - for "#!" scripts: the interpreter (and its closure, up to 4 levels as
//     the kernel allows); for "#!/usr/bin/env NAME", env itself and NAME
//     looked up on Options.Path, which must be the container's PATH.
//   - a directory is taken whole; symlinks inside it are kept only when they
//     resolve inside it (ErrEscapingSymlink otherwise). ELF files inside are
//     chased for libraries only with Options.TreeELF. (hookbox's compiler
//     refuses a directory named as a program; its renders take directories
//     only as package trees.)
//   - Options.Packages: Node package directories, each with the packages it
//     depends on as Node resolves them (NodeDependencies: "dependencies",
//     "optionalDependencies", "peerDependencies", "bundleDependencies",
//     looked up in node_modules from the package's directory up to "/").
//     Each of these is a directory taken whole except its top-level
//     node_modules, whose needed members are in the list themselves; the
//     path it was found at is walked as any program's, so npm link and
//     pnpm symlinks are recorded. ELF files inside (prebuilt .node addons)
//     follow Options.TreeELF as in any directory.
//   - Options.Dirs: extra directories (mount points), with missing parents.
//
// # Modes
//
// The manifest (render.Runfile.Mode) keeps the host permission bits (0777
// mask; setuid, setgid and sticky are never carried). The assembled tree
// normalises them, because its files are owned by the store's owner and not
// by the host owner, and because they must be read-only, but it never gives
// anyone access the host file did not give them (TreeMode):
//
//   - a file's owner class (the store's owner, who read the host file) may
//     read it, and execute it when the host mode has any execute bit;
//   - its group and others get exactly the read and execute bits the host
//     file gives others (the group is the store's, not the host file's, so
//     it gets no more than others): 0755 → 0555, 0644 → 0444, 0750 → 0500,
//     0640 and 0600 → 0400;
//   - a directory is 0555 whatever its host mode: a tree holds only the
//     closure's entries, never the rest of a private host directory, and
//     programs under a 0700 home directory must stay reachable.
//
// A container's processes are never the store's owner nor in its group,
// so they get from each tree file what other users of the host get from
// the host file. Every tree file has the modification time
// 1970-01-01T00:00:01Z (the seal mtime, see Store), so tools that compare
// source and cache mtimes (Python's timestamp-based .pyc) treat their caches
// as stale: they still work, without the cache.
//
// # Permissions
//
// The store's directories (runfiles/ and every directory of its layout)
// are 0700: no other host user can list or read anything in it, whatever
// the objects' modes. The trees need no more: overlayfs looks a lower
// layer up with the credentials of whoever mounted it (root, or the
// rootless user's containerd, which is the store's owner in its user
// namespace), and checks each file's own mode against the container's
// process. OpenStore creates the directories so and tightens those of a
// store written by an older hookbox (0755); it refuses one it cannot
// tighten. Objects stored by an older hookbox under the wider modes keep
// their names (sha256-0444/<hex> says the content, not the mode of the
// file it came from); no new tree links them for a restricted host file,
// whose objects have directories of their own, and an older tree whose
// files have the wider modes no longer matches its manifest's tree modes,
// so it is rebuilt when next used.
//
// # Store
//
// Layout under the root given to OpenStore (the cache directory for the CLI):
//
//	runfiles/sha256/<hex>        content of files of mode 0555
//	runfiles/sha256-<mode>/<hex> content of files of another mode (0444,
//	                             0544, 0511, 0500, 0400: objectModes)
//	runfiles/stat/<key>          stat cache: host file identity → digest,
//	                             and the seal of the object holding it
//	runfiles/trees/<hex>/        assembled trees, <hex> = manifest digest
//	runfiles/index/<hex>         assembly index: the last assembly of the
//	                             same inputs (<hex> = sha256 of them)
//	runfiles/tmp/                objects and trees being written
//
// <hex> is the lowercase hex sha256 of the content (of the canonical
// manifest for trees). The same content is stored once per mode it is
// needed with, because a tree's hard link shares its object's mode. Every
// directory of the layout is 0700 (see Permissions).
//
// A store object is written once: the host file is read once, and every
// byte read goes both into sha256 and into a temporary file in the store
// (never hash-then-reopen); the temporary file is made read-only and given
// the seal mtime. Once every file of the assembly is so staged, the store's
// filesystem is synced (one syncfs, one journal commit for all of them,
// where an fsync each cost half of a first assembly of 20,000 files; it
// also waits for whatever else that filesystem has to write), and only
// then is each hard-linked to its digest name (link fails when the name
// exists: an existing intact object is kept, a damaged one is replaced by
// rename). The host file's stat is compared before and
// after the read with what the closure analysed; a difference starts the
// assembly over (ErrSourceChanged after three attempts).
//
// The stat cache maps (device, inode, size, mtime ns, ctime ns) of a host
// file to its digest and size, one small file per key: created in place
// when new, replaced by rename, each written at most once per assembly
// (at its end, with the seal its object has then).
// A changed file changes its ctime, so it misses and is read again. An entry
// recorded less than two seconds after the file's ctime is not trusted
// (a same-size write within the same timestamp tick could hide), so freshly
// written files are re-read until they age.
//
// # Seals
//
// The mtime of an object is no proof: user space can set it back after
// editing the object in place. Each stat-cache entry therefore also holds
// the seal of the object its digest names: (device, inode, size, mode,
// mtime ns, ctime ns) of the object's inode when its content was last
// known to match its name. The kernel sets the ctime to the current time
// on every write, chmod, chown, link and unlink, and user space cannot set
// it back, so an object edited in place no longer matches its seal.
//
// A seal is taken when the object is stored (from the stat of the file
// that was written, once its temporary name is gone: a rename or unlink
// changes the ctime too), after a re-hash that finds the object intact,
// and when the verification of a tree finds its files: each hard link
// into a new tree changes its object's ctime, so every object still the
// inode that was checked, with nothing but its ctime moved forward, is
// sealed again.
// Without that, every new tree would cost a re-hash of all its objects on
// the next run. Other changes of the ctime are not the store's: a tree
// removed by hand or by a collector, or objects shared by host files of
// different keys (the same bytes at two paths, one of them in a new
// tree), cost one re-hash of the objects concerned, which seals them
// again. A store written before seals existed is re-hashed once.
//
// What the seal does not cover: whoever can write the store (its owner,
// root) can rewrite the stat-cache entry too, and so forge a seal; and on
// a kernel with coarse timestamps, an edit within the same tick (a few
// milliseconds) as a legitimate ctime change just before a seal keeps the
// sealed ctime. VerifyFull holds against both.
//
// # Verification
//
// Every Assemble checks every store object it uses before building or
// reusing a tree (through its tree's seals when nothing changed: Index).
// VerifyQuick (the default) checks type, size, mode and the seal mtime,
// then compares the object's stat with its seal (one lstat per file, the
// seal coming with the stat-cache entry already read); an object whose
// seal differs is re-hashed (Stats.ObjectsRehashed) and sealed again if
// intact. VerifyFull re-hashes every object (hookbox run
// --verify-runfiles). A missing or damaged object is replaced from the
// host file, read and hashed again as when first stored (Result.Repairs
// names each with what was wrong with it). An existing tree is reused only
// when a walk finds exactly the manifest's entries with the right types,
// modes and link texts, and each file is the very inode of its store object
// (or, for the rare copied file, has the right content); otherwise it is
// moved aside and rebuilt.
//
// # Index
//
// An assembly of a large package tree is mostly stats, and the checks
// above cost several per file: the closure's, a stat-cache read, the
// object's and the tree walk's. When nothing changed since the last
// assembly of the same inputs (programs and Options but Verify and
// Progress), the assembly index brings that down to one stat of each host
// file (the closure's walk, which must see every change anyway) and one
// of each tree entry, run on both cores at once. The index is written by
// every assembly that goes through the checks of Verification (VerifyFull
// included) and records:
//
//   - each host file of the closure with its stat key, when its content
//     was read, and its digest: what its stat-cache entry says;
//   - the manifest digest, naming the tree;
//   - the seal of every tree entry, and of the tree's root, as the
//     verification of the tree saw it (a file's seal is its store
//     object's: the tree file is a hard link to it).
//
// Assemble uses it only when every host file of the new closure has
// exactly the recorded stat key, read at least two seconds after its
// ctime (the stat cache's rule), the manifest they give has the recorded
// digest, and every tree entry still has its seal. A directory's seal
// covers its entries (adding, removing or renaming one moves its mtime
// and ctime), a symlink's its text (which cannot change in place), a
// file's its content and its object's. A file whose seal moved is still
// accepted when its inode is the one its stat-cache entry sealed (another
// tree linked the object since); anything else (a host file changed,
// added or removed, a file within the racy window, a tree entry edited,
// added, removed or replaced, VerifyFull) goes through the stat cache,
// the objects' checks and the tree walk above, which repair what they
// find and write the index again. The index says nothing the stat cache
// and the seals do not: whoever can forge those can forge it, and
// VerifyFull holds against both. A damaged or truncated index (it carries
// a CRC-32C) is ignored.
//
// What that costs is mostly the kernel's: pi's 19,650 files took 65-112 ms
// per cached assembly on a two-core VM (medians of 15 to 30, 2026-12-03,
// the spread this VM's), 120-150 ms of CPU, two-thirds of it in about
// 40,000 fstatat (1.1 us each on a hot entry, 1.7 us in a walk), getdents
// and directory opens. Opening each tree directory from its parent's
// descriptor instead of from the tree's root saved nothing measurable
// (129 against 130 ms of CPU, 6 interleaved pairs), and statx costs what
// fstatat does (300,000 calls of each).
//
// # Trees and concurrency
//
// Trees are built in runfiles/tmp and renamed into place, so a tree at its
// final name is complete (and it is verified on every use anyway, which
// also catches a crash that lost part of it). Their files are hard links to
// store objects, copied (from a verified read) only when linking is
// impossible: another filesystem, or too many links. Any number of
// processes and goroutines may assemble into one store at once: every write
// goes through a unique temporary name and a link or rename. A tree found
// damaged is moved aside even if others are using it; only tampering causes
// that. Nothing here deletes trees or objects that are merely old: garbage
// collection, leases protecting trees in use, and cleaning runfiles/tmp after
// a crash belong to the caller.
package runfiles

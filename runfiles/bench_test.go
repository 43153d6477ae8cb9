package runfiles

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// largeEngine is the Claude Code engine where hookbox's hosts install it: a
// 245 MB Bun single-file ELF, dynamically linked to glibc only.
const largeEngine = "/opt/engines/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

// BenchmarkAssembleLarge measures assembling the runfiles of a large real
// engine into a cold store (a fresh temporary store each iteration: read,
// hash, copy and fsync every byte) and into a warm one (stat cache, quick
// checks and a walk of the existing tree).
//
//	go test ./runfiles/ -run '^$' -bench AssembleLarge -benchtime 5x
func BenchmarkAssembleLarge(b *testing.B) {
	if _, err := os.Stat(largeEngine); err != nil {
		b.Skipf("no large engine at %s", largeEngine)
	}
	programs := []string{largeEngine}
	b.Run("cold", func(b *testing.B) {
		var copied int64
		for b.Loop() {
			b.StopTimer()
			s := openBenchStore(b)
			b.StartTimer()
			res, err := Assemble(context.Background(), s, programs, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			copied = res.Stats.BytesCopied
			removeTree(s.Root())
			b.StartTimer()
		}
		b.SetBytes(copied)
		b.ReportMetric(float64(copied), "bytes-copied/op")
	})
	b.Run("cached", func(b *testing.B) {
		s := openBenchStore(b)
		defer removeTree(s.Root())
		if _, err := Assemble(context.Background(), s, programs, Options{}); err != nil {
			b.Fatal(err)
		}
		var st Stats
		for b.Loop() {
			res, err := Assemble(context.Background(), s, programs, Options{})
			if err != nil {
				b.Fatal(err)
			}
			st = res.Stats
		}
		if st.BytesCopied != 0 || st.TreeBuilt {
			b.Errorf("cached assembly did work: %+v", st)
		}
		b.ReportMetric(float64(st.BytesCopied), "bytes-copied/op")
		b.ReportMetric(float64(st.FilesHashed), "files-hashed/op")
	})
	b.Run("cached-full-verify", func(b *testing.B) {
		s := openBenchStore(b)
		defer removeTree(s.Root())
		if _, err := Assemble(context.Background(), s, programs, Options{}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := Assemble(context.Background(), s, programs, Options{Verify: VerifyFull}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func openBenchStore(b *testing.B) *Store {
	dir, err := os.MkdirTemp("", "runfiles-bench-")
	if err != nil {
		b.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// manyFilesPackage is the size of the synthetic package of
// BenchmarkAssembleManyFiles: about what a large Node engine's
// node_modules holds.
const manyFilesPackage = 20000

// BenchmarkAssembleManyFiles measures assembling a directory of 20,000
// small files (a Node package taken whole) into a warm store: per file,
// the closure's lstat, a stat-cache read, the object's quick check and the
// tree walk's lstat. The cached assembly should stay within 100 ms.
//
//	go test ./runfiles/ -run '^$' -bench AssembleManyFiles
func BenchmarkAssembleManyFiles(b *testing.B) {
	pkg := b.TempDir()
	for i := range manyFilesPackage {
		dir := filepath.Join(pkg, "lib", fmt.Sprintf("m%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		body := fmt.Sprintf("module.exports = %d;\n%s", i, strings.Repeat("// filler\n", i%200))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.js", i)), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// Files written within the stat cache's racy window are read again on
	// every assembly: let them age, as an installed package has.
	time.Sleep(RacyWindow + 100*time.Millisecond)
	programs := []string{pkg}
	warm := func(b *testing.B) *Store {
		s := openBenchStore(b)
		b.Cleanup(func() { removeTree(s.Root()) })
		if _, err := Assemble(context.Background(), s, programs, Options{}); err != nil {
			b.Fatal(err)
		}
		return s
	}
	b.Run("cached", func(b *testing.B) {
		s := warm(b)
		var st Stats
		m := startAssemblyMetrics()
		for b.Loop() {
			res, err := Assemble(context.Background(), s, programs, Options{})
			if err != nil {
				b.Fatal(err)
			}
			st = res.Stats
			m.iteration()
		}
		if st.BytesCopied != 0 || st.TreeBuilt || st.FilesHashed != 0 || st.ObjectsRehashed != 0 {
			b.Errorf("cached assembly did work: %+v", st)
		}
		m.report(b)
		b.ReportMetric(float64(st.ObjectsRehashed), "objects-rehashed/op")
	})
	b.Run("cached-full-verify", func(b *testing.B) {
		s := warm(b)
		m := startAssemblyMetrics()
		for b.Loop() {
			if _, err := Assemble(context.Background(), s, programs, Options{Verify: VerifyFull}); err != nil {
				b.Fatal(err)
			}
			m.iteration()
		}
		m.report(b)
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s := openBenchStore(b)
			b.StartTimer()
			if _, err := Assemble(context.Background(), s, programs, Options{}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			removeTree(s.Root())
			b.StartTimer()
		}
	})
}

// assemblyMetrics adds what a busy machine disturbs least to ns/op: the
// fastest iteration, and the process's CPU time (user and system) per
// iteration.
type assemblyMetrics struct {
	last     time.Time
	fastest  time.Duration
	n        int
	cpuStart time.Duration
}

func startAssemblyMetrics() *assemblyMetrics {
	return &assemblyMetrics{last: time.Now(), cpuStart: processCPU()}
}

func (m *assemblyMetrics) iteration() {
	now := time.Now()
	if d := now.Sub(m.last); m.n == 0 || d < m.fastest {
		m.fastest = d
	}
	m.last = now
	m.n++
}

func (m *assemblyMetrics) report(b *testing.B) {
	if m.n == 0 {
		return
	}
	b.ReportMetric(float64(m.fastest)/float64(time.Millisecond), "fastest-ms")
	b.ReportMetric(float64(processCPU()-m.cpuStart)/float64(m.n)/float64(time.Millisecond), "cpu-ms/op")
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// realEngines are the Node engines `make real-engines` installs: a
// "#!/usr/bin/env node" script and its package, assembled as
// AssembleRender does (the package with the packages it depends on). pi's
// tree is the large one: about 20,000 files.
var realEngines = []struct{ name, script, pkg string }{
	{"pi", "/opt/engines/node_modules/@mariozechner/pi-coding-agent/dist/cli.js", "/opt/engines/node_modules/@mariozechner/pi-coding-agent"},
	{"gemini", "/opt/engines/node_modules/@google/gemini-cli/bundle/gemini.js", "/opt/engines/node_modules/@google/gemini-cli"},
}

// BenchmarkAssembleEngine measures assembling the real pi and Gemini CLI
// packages: cached (the store and its index from an earlier assembly: one
// stat per host file and per tree entry) and first (a fresh store: read,
// hash, copy and fsync every byte, build and verify the tree).
//
//	go test ./runfiles/ -run '^$' -bench AssembleEngine -benchtime 20x
func BenchmarkAssembleEngine(b *testing.B) {
	for _, eng := range realEngines {
		b.Run(eng.name, func(b *testing.B) {
			if _, err := os.Stat(eng.script); err != nil {
				b.Skipf("no %s engine at %s (make real-engines)", eng.name, eng.script)
			}
			programs := []string{eng.script}
			opts := Options{Packages: []string{eng.pkg}, ContainerPaths: true}
			b.Run("cached", func(b *testing.B) {
				s := openBenchStore(b)
				defer removeTree(s.Root())
				first, err := Assemble(context.Background(), s, programs, opts)
				if err != nil {
					b.Fatal(err)
				}
				var st Stats
				m := startAssemblyMetrics()
				for b.Loop() {
					res, err := Assemble(context.Background(), s, programs, opts)
					if err != nil {
						b.Fatal(err)
					}
					st = res.Stats
					m.iteration()
				}
				if !st.Indexed || st.FilesHashed != 0 || st.ObjectsRehashed != 0 || st.TreeBuilt {
					b.Errorf("cached assembly did work: %+v", st)
				}
				m.report(b)
				b.ReportMetric(float64(first.Stats.Files), "files")
				b.ReportMetric(float64(first.Stats.BytesCopied)/1e6, "MB")
			})
			b.Run("first", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					s := openBenchStore(b)
					b.StartTimer()
					if _, err := Assemble(context.Background(), s, programs, opts); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					removeTree(s.Root())
					b.StartTimer()
				}
			})
		})
	}
}

// BenchmarkClosureHostPrograms measures the closure of every ELF program
// in /usr/bin (as a spec declaring them all as tools): one ELF read per
// program and a library search per DT_NEEDED, most of them for the same
// few libraries.
//
//	go test ./runfiles/ -run '^$' -bench ClosureHostPrograms
func BenchmarkClosureHostPrograms(b *testing.B) {
	entries, err := os.ReadDir("/usr/bin")
	if err != nil {
		b.Skip(err)
	}
	var programs []string
	for _, e := range entries {
		p := filepath.Join("/usr/bin", e.Name())
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm()&0o004 == 0 {
			continue
		}
		if f, err := os.Open(p); err == nil {
			head := make([]byte, 4)
			if n, _ := f.Read(head); isELF(head[:n]) {
				programs = append(programs, p)
			}
			f.Close()
		}
	}
	if len(programs) < 100 {
		b.Skipf("only %d ELF programs in /usr/bin", len(programs))
	}
	var entriesFound int
	for b.Loop() {
		p, err := closure(context.Background(), programs, Options{}, 0)
		if err != nil {
			b.Fatal(err)
		}
		entriesFound = len(p.entries)
	}
	b.ReportMetric(float64(len(programs)), "programs")
	b.ReportMetric(float64(entriesFound), "entries")
}

package buildkit

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/buildkit/solver/pb"
	"google.golang.org/grpc/metadata"

	"hookbox.dev/hookbox/images"
)

var testCA = []byte("-----BEGIN CERTIFICATE-----\nnot a real certificate\n-----END CERTIFICATE-----\n")

func TestMarshalIsDeterministic(t *testing.T) {
	ctx := context.Background()
	a, err := Marshal(ctx, images.NewDefinition(testCA))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(ctx, images.NewDefinition(slices.Clone(testCA)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(a.Def, b.Def, bytes.Equal) {
		t.Fatal("two Marshal calls gave different op bytes")
	}
	ha, err := a.Head()
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Head()
	if err != nil {
		t.Fatal(err)
	}
	if ha != hb {
		t.Fatalf("heads differ: %s vs %s", ha, hb)
	}
	c, err := Marshal(ctx, images.NewDefinition(append(slices.Clone(testCA), '\n')))
	if err != nil {
		t.Fatal(err)
	}
	if hc, _ := c.Head(); hc == ha {
		t.Fatal("a changed CA bundle kept the LLB head digest")
	}
}

// llbEntry is what one file action of the marshaled definition creates.
type llbEntry struct {
	path      string
	kind      string // "mkdir", "mkfile", "copy"
	mode      int64
	data      []byte
	owner     *pb.ChownOpt
	timestamp int64
}

// decodeFileActions returns the actions of the file op that creates
// /etc/passwd: the image's own file op, as opposed to the one making the
// empty directory a sticky directory is copied from.
func decodeFileActions(t *testing.T, def images.Definition) []llbEntry {
	t.Helper()
	out, err := Marshal(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range out.Def {
		var op pb.Op
		if err := op.UnmarshalVT(raw); err != nil {
			t.Fatalf("decoding op: %v", err)
		}
		f := op.GetFile()
		if f == nil {
			continue
		}
		var entries []llbEntry
		isImage := false
		for _, a := range f.Actions {
			switch {
			case a.GetMkdir() != nil:
				m := a.GetMkdir()
				if m.MakeParents {
					t.Errorf("mkdir %s makes parents: every directory must be explicit", m.Path)
				}
				entries = append(entries, llbEntry{m.Path, "mkdir", int64(m.Mode), nil, m.Owner, m.Timestamp})
			case a.GetMkfile() != nil:
				m := a.GetMkfile()
				if m.Path == "/etc/passwd" {
					isImage = true
				}
				entries = append(entries, llbEntry{m.Path, "mkfile", int64(m.Mode), m.Data, m.Owner, m.Timestamp})
			case a.GetCopy() != nil:
				c := a.GetCopy()
				entries = append(entries, llbEntry{c.Dest, "copy", int64(c.Mode), nil, c.Owner, c.Timestamp})
			default:
				t.Errorf("unexpected file action %T", a.GetAction())
			}
		}
		if isImage {
			return entries
		}
	}
	t.Fatal("no file op creates /etc/passwd")
	return nil
}

func TestLLBMatchesDefinition(t *testing.T) {
	def := images.NewDefinition(testCA)
	got := decodeFileActions(t, def)
	var paths []string
	for _, e := range got {
		paths = append(paths, e.path)
	}
	if want := def.Paths(); !slices.Equal(paths, want) {
		t.Fatalf("LLB paths:\n got %q\nwant %q", paths, want)
	}
	wantTime := images.ModTime().UnixNano()
	for i, e := range got {
		d := def.Entries[i]
		if e.mode != images.UnixMode(d.Mode) {
			t.Errorf("%s: mode %o, want %o", e.path, e.mode, images.UnixMode(d.Mode))
		}
		wantKind := map[images.EntryType]string{images.Dir: "mkdir", images.File: "mkfile"}[d.Type]
		if d.Path == "/tmp" {
			wantKind = "copy" // sticky: Mkdir drops bits above 0777
		}
		if e.kind != wantKind {
			t.Errorf("%s: action %s, want %s", e.path, e.kind, wantKind)
		}
		if !bytes.Equal(e.data, d.Data) {
			t.Errorf("%s: data differs", e.path)
		}
		if e.timestamp != wantTime {
			t.Errorf("%s: timestamp %d, want %d", e.path, e.timestamp, wantTime)
		}
		if e.owner.GetUser().GetByID() != 0 || e.owner.GetGroup().GetByID() != 0 ||
			e.owner.GetUser().GetByName() != nil || e.owner.GetGroup().GetByName() != nil || e.owner.GetUser() == nil {
			t.Errorf("%s: owner %v, want explicit 0:0", e.path, e.owner)
		}
	}
}

func TestBuildDropsContainerdNamespaceHeader(t *testing.T) {
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("keep", "1"))
	ctx = namespaces.WithNamespace(ctx, images.Namespace)
	md, _ := metadata.FromOutgoingContext(withoutContainerdNamespace(ctx))
	if got := md.Get(namespaces.GRPCHeader); len(got) != 0 {
		t.Errorf("namespace header kept: %q", got)
	}
	if got := md.Get("keep"); !slices.Equal(got, []string{"1"}) {
		t.Errorf("other metadata lost: %q", got)
	}
	if plain := context.Background(); withoutContainerdNamespace(plain) != plain {
		t.Error("a context without the header was replaced")
	}
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/oci"
)

// baseViews lists the namespace's base image views (key -> parent).
func baseViews(t *testing.T, ctx context.Context, client *containerd.Client) map[string]string {
	t.Helper()
	views := map[string]string{}
	err := client.SnapshotService(images.Snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Labels[images.BaseLabel] != "" {
			views[info.Name] = info.Parent
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return views
}

// Runs mount one shared read-only view of the base image, held by a lease
// of its own, and make no snapshot or lease of their own; hookbox gc
// removes another base image's view only while no run has a container,
// and never the current one.
func TestRunsShareTheBaseView(t *testing.T) {
	e := newEnv(t)
	client, err := containerd.New(e.containerd())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := namespaces.WithNamespace(context.Background(), oci.Namespace)

	spec := e.spec("shared", "- print: hi\n- exit: 0")
	var ids []string
	for i := 0; i < 2; i++ {
		r := e.run(spec)
		if res := r.mustResult(t); r.code != 0 || res.Status != launcher.StatusCompleted {
			t.Fatalf("run %d: exit %d, %s\n%s", i, r.code, res.Status, r.stderr)
		}
		ids = append(ids, r.mustResult(t).RunID)
	}
	views := baseViews(t, ctx, client)
	if len(views) != 1 {
		t.Fatalf("base views %v: want the one every run shares", views)
	}
	var current, parent string
	for k, p := range views {
		current, parent = k, p
	}
	if !strings.HasPrefix(current, "hookbox-base-") {
		t.Errorf("base view %q", current)
	}
	all, err := client.LeasesService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := false
	for _, l := range all {
		held = held || l.ID == current
		for _, id := range ids {
			if l.ID == id || l.Labels[launcher.LabelRunID] == id {
				t.Errorf("run %s left a lease of its own: %+v", id, l)
			}
		}
	}
	if !held {
		t.Errorf("no lease %s holds the base view", current)
	}
	for _, id := range ids {
		e.assertNothingLeft(id)
	}

	// Another base image's view (a CA bundle that changed, another
	// hookbox version), on the same layer for the test's sake.
	stale := "hookbox-base-" + strings.Repeat("0", 64)
	lctx := leases.WithLease(ctx, stale)
	if _, err := client.LeasesService().Create(ctx, leases.WithID(stale), leases.WithLabels(map[string]string{images.BaseLabel: stale})); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SnapshotService(images.Snapshotter).View(lctx, stale, parent, snapshots.WithLabels(map[string]string{images.BaseLabel: stale})); err != nil {
		t.Fatal(err)
	}
	gc := func() launcher.GCReport {
		out, err := e.command(context.Background(), "gc", "--json", "--state-dir", e.state).Output()
		if err != nil {
			t.Fatalf("gc: %v", err)
		}
		var report launcher.GCReport
		if err := json.Unmarshal(out, &report); err != nil {
			t.Fatalf("gc --json: %v: %s", err, out)
		}
		return report
	}
	// While a run has a container, the stale view stays: that run may be
	// an older hookbox's, mounting it.
	marker := fmt.Sprintf("hbx-baseview-%d", time.Now().UnixNano())
	runCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, _, rest := e.startUntil(runCtx, e.spec("live", "- daemonize: {marker: "+marker+"}\n- print: ready\n- sleep: 1h", "  limits: {timeout: 30s}"), "ready")
	gc()
	if _, ok := baseViews(t, ctx, client)[stale]; !ok {
		t.Error("gc removed another base image's view while a run had a container")
	}
	cmd.Process.Signal(syscall.SIGINT)
	for rest.Scan() {
	}
	cmd.Wait()

	report := gc()
	removed := false
	for _, a := range report.Actions {
		removed = removed || (a.What == "base-view" && a.Detail == stale && a.Error == "")
	}
	views = baseViews(t, ctx, client)
	if _, ok := views[stale]; ok || !removed {
		t.Errorf("after the run, gc actions %+v, views %v: want the other base image's view removed", report.Actions, views)
	}
	if _, ok := views[current]; !ok {
		t.Errorf("gc removed the current base view %s", current)
	}
}

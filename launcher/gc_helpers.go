package launcher

import (
	"context"
	"fmt"
	"time"

	"hookbox.dev/hookbox/launcher/cgroup"
)

// collectHelpers removes the cgroups of host-side helpers (secret lookups,
// notifiers) that a killed hookbox left, killing what still runs in them
// first. A helper cgroup names its hookbox by pid and start time
// (cgroup.HelperName): one whose hookbox is alive is left alone, whether
// or not its run has a record here (a lookup runs before the record
// exists).
func collectHelpers(ctx context.Context, helpers cgroup.Helpers, dryRun bool, report *GCReport) {
	left, err := helpers.Abandoned()
	if err != nil {
		report.Actions = append(report.Actions, GCAction{What: "helper-cgroup", Detail: helpers.Parent, Error: err.Error()})
	}
	for _, h := range left {
		cg, err := cgroup.Open(h.Path)
		if err != nil {
			continue // removed meanwhile
		}
		members, _ := cg.Members()
		detail := fmt.Sprintf("%s (%s, %d processes)", h.Path, h.Owner.Role, len(members))
		record(report, h.Owner.RunID, "helper-cgroup", detail, dryRun, func() error {
			destroyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return cg.Destroy(destroyCtx)
		})
	}
}

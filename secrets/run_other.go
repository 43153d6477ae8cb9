//go:build !linux

package secrets

import (
	"context"
	"time"
)

// runLookup needs Linux process-group and waitid semantics to guarantee that
// nothing outlives the lookup; elsewhere the lookup is not run at all.
func runLookup(ctx context.Context, argv, env []string, timeout time.Duration, _ helper) ([]byte, runResult) {
	return nil, runResult{reason: ReasonLookupStartFailed, status: -1, detail: "secret lookup is supported on Linux only"}
}

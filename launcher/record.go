package launcher

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

// ResultSchemaVersion is the version of result.json. Within a version,
// fields never change name, type, meaning or requiredness; new optional
// fields may be added (docs/contracts.md §5).
const ResultSchemaVersion = 1

// Files of a run record directory (docs/architecture.md, "Words").
const (
	IntentFile  = "intent.json"
	RenderFile  = "render.json"
	OCIFile     = "oci.json"
	SpawnedFile = "spawned.json"
	StdoutFile  = "stdout"
	StderrFile  = "stderr.log"
	ResultFile  = "result.json"
	ArtifactDir = "artifacts"
)

// NewRunID returns a run id: sortable by start time, unique, and usable as
// a containerd id, a cgroup name and a DNS-1123 label suffix.
func NewRunID(now time.Time) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "hbx-" + strconv.FormatInt(now.UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

// RunsDir is where run records live.
func RunsDir(stateDir string) string { return filepath.Join(stateDir, "runs") }

// Intent is written before anything is created, so that a later gc always
// finds what a run may have left behind (docs/contracts.md §1): the
// container id is chosen before creation.
type Intent struct {
	SchemaVersion int    `json:"schema_version"`
	RunID         string `json:"run_id"`
	Spawn         string `json:"spawn"`
	ContainerID   string `json:"container_id"`
	// SnapshotKey is the run's own base image view, which hookbox before
	// the shared view (BaseViewKey) made per run; empty now.
	SnapshotKey  string    `json:"snapshot_key,omitempty"`
	CgroupsPath  string    `json:"cgroups_path"`
	HookboxPID   int       `json:"hookbox_pid"`
	HookboxStart uint64    `json:"hookbox_start_time"` // clock ticks since boot (/proc/pid/stat field 22)
	Address      string    `json:"containerd_address"`
	CreatedAt    time.Time `json:"created_at"`
}

// Spawned is the spawn record: written once the sandbox exists and before
// any output is read (docs/contracts.md §1). It binds identity with more
// than a pid.
type Spawned struct {
	SchemaVersion int       `json:"schema_version"`
	RunID         string    `json:"run_id"`
	ContainerID   string    `json:"container_id"`
	InitPID       int       `json:"init_pid"`
	InitStartTime uint64    `json:"init_start_time"`
	CgroupsPath   string    `json:"cgroups_path"`
	CgroupID      uint64    `json:"cgroup_id,omitempty"`
	RenderDigest  string    `json:"render_digest"`
	StartedAt     time.Time `json:"started_at"`
}

// writeJSON writes v atomically (temp file + rename) with mode perm.
func writeJSON(path string, v any, perm os.FileMode) error {
	data, err := recordJSON(v)
	if err != nil {
		return err
	}
	return host.WriteFileAtomic(path, data, perm)
}

// recordJSON is v as a record file holds it: indented, newline-terminated.
func recordJSON(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// ReadIntent reads a run record's intent.
func ReadIntent(recordDir string) (*Intent, error) {
	var in Intent
	data, err := os.ReadFile(filepath.Join(recordDir, IntentFile))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(recordDir, IntentFile), err)
	}
	return &in, nil
}

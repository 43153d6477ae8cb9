package cgroup

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// procStat is what this package needs from /proc/<pid>/stat.
type procStat struct {
	State     byte   // field 3: R, S, D, Z, X…
	StartTime uint64 // field 22: clock ticks after boot when the process started
}

// parseStat parses /proc/<pid>/stat (proc(5)). Field 2, comm, is in
// parentheses and may itself contain spaces, parentheses and newlines, so
// the fields after it are found from the last ')' in the text: no later
// field can contain one.
func parseStat(data string) (procStat, error) {
	open := strings.IndexByte(data, '(')
	end := strings.LastIndexByte(data, ')')
	if open < 1 || end < open {
		return procStat{}, fmt.Errorf("proc stat: no (comm) in %q", truncate(data))
	}
	if _, err := strconv.ParseUint(strings.TrimSpace(data[:open]), 10, 31); err != nil {
		return procStat{}, fmt.Errorf("proc stat: bad pid field in %q", truncate(data))
	}
	rest := strings.Fields(data[end+1:])
	// rest[0] is field 3, so field 22 is rest[19].
	if len(rest) < 20 || len(rest[0]) != 1 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after comm, want at least 20", len(rest))
	}
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: start time %q: %w", rest[19], err)
	}
	return procStat{State: rest[0][0], StartTime: start}, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// procCgroupWithin reports whether /proc/<pid>/cgroup text (lines of
// "hierarchy-id:controllers:path") puts the process at cgroup p or below
// it in at least one hierarchy.
func procCgroupWithin(data, p string) bool {
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if c := parts[2]; c == p || strings.HasPrefix(c, p+"/") {
			return true
		}
	}
	return false
}

// parseKeyedCounters parses a flat keyed file ("key value" per line, as
// memory.events, memory.oom_control and cgroup.events are).
func parseKeyedCounters(data string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed line %q: %w", line, err)
		}
		out[f[0]] = v
	}
	return out, nil
}

// parsePids parses cgroup.procs: one decimal pid per line.
func parsePids(data string) ([]int, error) {
	var out []int
	for _, line := range strings.Split(data, "\n") {
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("malformed pid %q", line)
		}
		out = append(out, pid)
	}
	return out, nil
}

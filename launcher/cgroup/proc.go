package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

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

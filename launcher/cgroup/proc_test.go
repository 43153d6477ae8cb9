package cgroup

import (
	"reflect"
	"testing"
)

func TestParseKeyedCounters(t *testing.T) {
	got, err := parseKeyedCounters("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n")
	want := map[string]uint64{"low": 0, "high": 0, "max": 12, "oom": 1, "oom_kill": 1, "oom_group_kill": 0}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseKeyedCounters = %v, %v", got, err)
	}
	for _, bad := range []string{"populated", "populated 1 2", "oom_kill -1", "frozen x"} {
		if _, err := parseKeyedCounters(bad); err == nil {
			t.Errorf("parseKeyedCounters(%q) succeeded", bad)
		}
	}
}

func TestParsePids(t *testing.T) {
	got, err := parsePids("12\n7\n12\n")
	if err != nil || !reflect.DeepEqual(got, []int{12, 7, 12}) {
		t.Errorf("parsePids = %v, %v", got, err)
	}
	if got, err := parsePids(""); err != nil || len(got) != 0 {
		t.Errorf("parsePids(empty) = %v, %v", got, err)
	}
	for _, bad := range []string{"0\n", "-3\n", "12 \n", "x\n"} {
		if _, err := parsePids(bad); err == nil {
			t.Errorf("parsePids(%q) succeeded", bad)
		}
	}
}

package cgroup

import (
	"reflect"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want procStat
	}{
		{"plain", "1234 (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n",
			procStat{'S', 987654}},
		{"comm with parens and spaces", "1234 (a) (b c) Z 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 42 0 0\n",
			procStat{'Z', 42}},
		{"comm that looks like fields", "7 () R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0",
			procStat{'S', 5}},
		{"comm with a newline", "8 (x\ny) S 1 8 8 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0",
			procStat{'S', 77}},
		{"exactly field 22", "9 (z) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615",
			procStat{'R', 18446744073709551615}},
	} {
		got, err := parseStat(tc.stat)
		if err != nil || got != tc.want {
			t.Errorf("%s: parseStat = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{
		"",
		"1234 sleep S 1",
		"(sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654",
		"x (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654",
		"1234 (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0",
		"1234 (sleep) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 -5",
		"1234 (sleep) SS 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 5",
		"1234 )sleep( S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 5",
	} {
		if got, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) = %+v, want an error", bad, got)
		}
	}
}

func TestProcCgroupWithin(t *testing.T) {
	hybrid := "9:name=systemd:/hookbox/r1\n4:memory:/hookbox/r1/sub\n1:cpu,cpuacct:/\n0::/hookbox/r1\n"
	for _, tc := range []struct {
		data, path string
		want       bool
	}{
		{hybrid, "/hookbox/r1", true},
		{hybrid, "/hookbox/r1/sub", true},
		{hybrid, "/hookbox/r", false}, // a prefix of a name is not an ancestor
		{hybrid, "/hookbox/r1/su", false},
		{"0::/hookbox/r12\n", "/hookbox/r1", false},
		{"0::/\n", "/hookbox/r1", false},
		{"garbage\n", "/hookbox/r1", false},
		{"", "/hookbox/r1", false},
	} {
		if got := procCgroupWithin(tc.data, tc.path); got != tc.want {
			t.Errorf("procCgroupWithin(%q, %q) = %v, want %v", tc.data, tc.path, got, tc.want)
		}
	}
}

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

package rootless

import (
	"bufio"
	"strings"
	"testing"
)

func TestCountSubIDs(t *testing.T) {
	text := "alice:100000:65536\nbob:165536:65536\n1003:231072:1000\nalice:300000:10\nbad line\n"
	for _, c := range []struct {
		name, uid string
		want      int
	}{{"alice", "1001", 65546}, {"bob", "1002", 65536}, {"carol", "1003", 1000}, {"dave", "1004", 0}} {
		if got := countSubIDs(bufio.NewScanner(strings.NewReader(text)), c.name, c.uid); got != c.want {
			t.Errorf("%s: %d subordinate ids, want %d", c.name, got, c.want)
		}
	}
}

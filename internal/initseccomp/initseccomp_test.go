package initseccomp

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEncodeDecode(t *testing.T) {
	prog := []unix.SockFilter{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 2, K: 0xc000003e}, {Code: 0x06, K: unix.SECCOMP_RET_ALLOW}}
	data := Encode(prog)
	if len(data) != 24 {
		t.Fatalf("%d bytes for 3 instructions", len(data))
	}
	got, err := Decode(data)
	if err != nil || !slices.Equal(got, prog) {
		t.Errorf("decoded %v, %v; want %v", got, err, prog)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":     {nil, "empty"},
		"a partial": {make([]byte, 12), "not a whole number"},
		"too long":  {make([]byte, 8*(maxInstructions+1)), "more than the kernel's"},
	} {
		if _, err := Decode(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// The variable is taken out of the environment the engine gets; the rest
// stays in order.
func TestExpected(t *testing.T) {
	path, rest := Expected([]string{"A=1", EnvName + "=" + Path, "B=2"})
	if path != Path || !slices.Equal(rest, []string{"A=1", "B=2"}) {
		t.Errorf("%q %q", path, rest)
	}
	if path, rest := Expected([]string{"A=1"}); path != "" || !slices.Equal(rest, []string{"A=1"}) {
		t.Errorf("without the variable: %q %q", path, rest)
	}
}

package userns

import "testing"

func TestIsIdentityMap(t *testing.T) {
	for text, want := range map[string]bool{
		"         0          0 4294967295\n": true,
		"0 1001 1\n1 100000 65536\n":         false,
		"0 0 65536\n":                        false,
		"":                                   false,
	} {
		if got := IsIdentityMap(text); got != want {
			t.Errorf("IsIdentityMap(%q) = %v, want %v", text, got, want)
		}
	}
}

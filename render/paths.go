package render

import "strings"

// ComparePaths orders clean slash paths component by component: '/' sorts
// before every other byte, so a path sorts right before everything beneath
// it ("/a" < "/a/b" < "/a-b"). Sorting mounts with it puts parents first.
func ComparePaths(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		switch {
		case ca == cb:
			continue
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		default:
			return 1
		}
	}
	return len(a) - len(b)
}

// Within reports whether clean slash path p is dir or lexically beneath it.
func Within(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

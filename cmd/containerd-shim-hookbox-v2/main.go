// Command containerd-shim-hookbox-v2 is the runtime binary of hookbox's
// runs: the front of containerd's runc shim (package launcher/shimfront).
package main

import (
	"os"

	"hookbox.dev/hookbox/launcher/shimfront"
)

func main() {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = ""
	}
	os.Exit(shimfront.Main(os.Args[1:], cwd, os.Stdout, os.Stderr))
}

// Command pause is the cluster's pod sandbox process (the role of
// registry.k8s.io/pause): it holds the pod's namespaces, reaps the
// children it inherits as PID 1 of a shared PID namespace, and exits on
// SIGINT or SIGTERM. hookbox-cluster up builds it into the sandbox image,
// since no registry is reachable.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

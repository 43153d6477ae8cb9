// Command hookbox-cluster starts and stops hookbox's single-node test
// cluster (see the cluster package): up starts the binaries that make
// cluster-build put next to it and returns once the node is Ready; down
// stops them and removes every process, mount, network interface, cgroup
// and file they left.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"hookbox.dev/hookbox/cluster"
)

const usage = `usage: hookbox-cluster [flags] up|down|status|etcd

  up      start etcd, containerd, kube-apiserver, kube-controller-manager,
          kube-scheduler and the kubelet on loopback; return once the node
          is Ready (the admin kubeconfig is <state>/admin.conf)
  down    stop everything up started and remove its state, mounts,
          interfaces and cgroups
  status  print which components run
  etcd    run the embedded etcd in the foreground (up starts it this way)

flags:
`

func main() {
	var l cluster.Layout
	flag.StringVar(&l.Bin, "bin", "", "directory holding the cluster binaries (default: this program's directory)")
	flag.StringVar(&l.State, "state", cluster.DefaultState, "persistent state: pki, kubeconfigs, etcd data, containerd root, kubelet root, logs")
	flag.StringVar(&l.Run, "run", cluster.DefaultRun, "runtime state: sockets, pid files, containerd and runc state")
	timeout := flag.Duration("timeout", 5*time.Minute, "up: how long to wait for the node to be Ready")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if l.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			fatal(err)
		}
		l.Bin = filepath.Dir(exe)
	}
	var err error
	if l.Bin, err = filepath.Abs(l.Bin); err != nil {
		fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch flag.Arg(0) {
	case "up":
		if err = requireRoot(); err == nil {
			if err = cluster.Up(ctx, l, *timeout, os.Stdout); err != nil {
				err = fmt.Errorf("%w\n(what started still runs, logs in %s: stop it with make cluster-down)", err, l.Logs())
			}
		}
	case "down":
		if err = requireRoot(); err == nil {
			err = cluster.Down(l, os.Stdout)
		}
	case "status":
		err = cluster.Status(l, os.Stdout)
	case "etcd":
		err = cluster.RunEtcd(ctx, l)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fatal(err)
	}
}

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("hookbox-cluster must run as root: it starts containerd and a kubelet")
	}
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "hookbox-cluster:", err)
	os.Exit(1)
}

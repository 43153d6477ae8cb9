package cluster

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// RunEtcd runs a one-member etcd (embedded, go.etcd.io/etcd/server/v3) on
// loopback until ctx ends. fsync is off: the cluster is for tests, its
// data is thrown away by down, and fsync on a shared CI disk costs seconds
// per write burst.
func RunEtcd(ctx context.Context, l Layout) error {
	cfg := embed.NewConfig()
	cfg.Name = "hookbox-cluster"
	cfg.Dir = l.EtcdData()
	client, _ := url.Parse(EtcdURL())
	peer, _ := url.Parse(EtcdPeerURL())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd in %s: %w", cfg.Dir, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return fmt.Errorf("etcd in %s was not ready after a minute", cfg.Dir)
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return nil
	}
}

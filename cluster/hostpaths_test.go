package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A cluster whose daemons were killed leaves libcni result caches for its
// pods on both networks, the pod network and the CRI's cni-loopback (as a
// killed session left them on this host); down removes exactly those, not
// another CNI user's.
func TestClusterCNIResultsAfterAKilledCluster(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const a, b, lonely, other = "aaaa", "bbbb", "cccc", "dddd"
	write(cniNetwork+"-"+a+"-eth0", `{"kind":"cniCacheV1","containerId":"aaaa","networkName":"hookbox-cluster","ifName":"eth0"}`)
	write("cni-loopback-"+a+"-lo", `{"kind":"cniCacheV1","containerId":"aaaa","networkName":"cni-loopback","ifName":"lo"}`)
	write(cniNetwork+"-"+b+"-eth0", `{"kind":"cniCacheV1","containerId":"bbbb","networkName":"hookbox-cluster","ifName":"eth0"}`)
	// A sandbox of the cluster whose pod network was never set up.
	write("cni-loopback-"+lonely+"-lo", `{"kind":"cniCacheV1","containerId":"cccc","networkName":"cni-loopback","ifName":"lo"}`)
	// Another CNI user's pod: kept.
	write("cni-loopback-"+other+"-lo", `{"kind":"cniCacheV1","containerId":"dddd","networkName":"cni-loopback","ifName":"lo"}`)
	write("podman-"+other+"-eth0", `{"kind":"cniCacheV1","containerId":"dddd","networkName":"podman","ifName":"eth0"}`)
	write("not-json", `garbage`)

	got := clusterCNIResults(dir, map[string]bool{lonely: true})
	for i := range got {
		got[i] = filepath.Base(got[i])
	}
	slices.Sort(got)
	want := []string{"cni-loopback-aaaa-lo", "cni-loopback-cccc-lo", "hookbox-cluster-aaaa-eth0", "hookbox-cluster-bbbb-eth0"}
	if !slices.Equal(got, want) {
		t.Fatalf("cluster's results = %q, want %q", got, want)
	}
	if got := clusterCNIResults(filepath.Join(dir, "missing"), nil); len(got) != 0 {
		t.Fatalf("a missing directory gave %q", got)
	}
}

package launcher

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/internal/nsnet"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
)

// NetworkFile is the run record's egress record: one JSON line per
// connection attempt through the proxy, allowed or refused.
const NetworkFile = "network.jsonl"

// NetworkResult is result.json's network section: evidence of its own,
// beside the exec verdict. It says which destinations the run used (with
// counts and bytes) and which attempts the proxy refused (with reasons).
type NetworkResult struct {
	Mode string `json:"mode"` // render.NetworkNone or render.NetworkAllowlist
	// ProxyAddress is where the proxy listened inside the container.
	ProxyAddress string `json:"proxy_address,omitempty"`
	// Allowed and Refused count attempts; Used and Refusals break them down
	// (egress.Stats).
	Allowed  int64            `json:"allowed"`
	Refused  int64            `json:"refused"`
	Used     []egress.Use     `json:"used,omitempty"`
	Refusals []egress.Refusal `json:"refusals,omitempty"`
	Unlisted int64            `json:"unlisted,omitempty"`
}

// egressRun is the proxy of one run and its record.
type egressRun struct {
	proxy    *egress.Proxy
	served   chan error // one value per listener served
	gateways int
	mu       sync.Mutex
	file     *os.File
	out      *bufio.Writer
}

// startEgress opens the proxy's listener inside the container's network
// namespace (init exists, nothing has run yet) and serves it from this
// process, which dials upstream from its own namespace. Nothing extra runs
// in the container, so the exec trace stays the render's. A host that
// cannot offer egress is an error before Start: never a silently open or
// silently closed network.
func (x *execution) startEgress(initPID int) error {
	x.result.Network = &NetworkResult{Mode: x.r.Network}
	if x.r.Network != render.NetworkAllowlist {
		return nil
	}
	if x.r.Egress == nil {
		return fmt.Errorf("egress: the render's network is %s but it lists no destinations; recompile the spec", x.r.Network)
	}
	policy := plan.EgressPolicy(x.r)
	if err := policy.Validate(); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	nsPath := "/proc/" + strconv.Itoa(initPID) + "/ns/net"
	l, err := nsnet.Listen(nsPath, x.r.Egress.ProxyAddress)
	if err != nil {
		return fmt.Errorf("egress: cannot listen at %s inside the container's network namespace (%w): hookbox needs CAP_SYS_ADMIN over that namespace (run as root, or rootless inside RootlessKit's namespaces); hookbox doctor says whether this host can offer egress", x.r.Egress.ProxyAddress, err)
	}
	f, err := os.OpenFile(filepath.Join(x.dir, NetworkFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		l.Close()
		return err
	}
	e := &egressRun{served: make(chan error, 1+len(x.r.Gateways)), file: f, out: bufio.NewWriterSize(f, 64<<10)}
	e.proxy = egress.New(egress.Options{Policy: policy, Record: func(a egress.Attempt) {
		line, err := json.Marshal(a)
		if err != nil {
			return
		}
		e.mu.Lock()
		e.out.Write(line)
		e.out.WriteByte('\n')
		e.mu.Unlock()
		x.emit(Event{Type: EventNetwork, Network: line})
	}})
	go func() { e.served <- e.proxy.Serve(l) }()
	x.egress = e
	if err := x.startGateways(nsPath); err != nil {
		return err // stopEgress closes the proxy and what started
	}
	x.result.Network.ProxyAddress = x.r.Egress.ProxyAddress
	x.progress("network", "egress proxy at %s in the container, %d destinations allowed", x.r.Egress.ProxyAddress, len(policy.Allow))
	return nil
}

// startGateways opens each gateway's listener inside the container's
// network namespace and serves it from this process with the credential
// resolved on the host: the value never enters the container.
func (x *execution) startGateways(nsPath string) error {
	routes, err := plan.GatewayRoutes(x.r, x.credentials)
	if err != nil {
		return err
	}
	for i, route := range routes {
		listen := x.r.Gateways[i].Listen
		l, err := nsnet.Listen(nsPath, listen)
		if err != nil {
			return fmt.Errorf("gateway %s: cannot listen at %s inside the container's network namespace: %w", route.Name, listen, err)
		}
		e := x.egress
		e.gateways++
		go func() { e.served <- e.proxy.ServeGateway(l, route) }()
		x.progress("network", "model gateway %s at %s in the container, forwarding to %s", route.Name, listen, route.Upstream)
	}
	return nil
}

// stopEgress ends every proxied connection (the engine is gone by now),
// flushes network.jsonl and sums it into the result.
func (x *execution) stopEgress() error {
	e := x.egress
	if e == nil {
		return nil
	}
	x.egress = nil
	e.proxy.Close()
	for range 1 + e.gateways {
		<-e.served
	}
	st := e.proxy.Stats()
	n := x.result.Network
	n.Allowed, n.Refused, n.Used, n.Refusals, n.Unlisted = st.Allowed, st.Refused, st.Used, st.Refusals, st.Unlisted
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.out.Flush(); err != nil {
		e.file.Close()
		return err
	}
	return e.file.Close()
}

# hookbox — see README.md. Every target works on a fresh clone.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
FUZZTIME ?= 60s
# staticcheck, pinned and fetched through the module proxy by go run (no
# go.mod entry); v0.8.2 (2026.2.2) builds with and checks Go 1.26.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build generate vmlinux real-engines test test-rootless integration lint fmt schema fuzz bench demo setup clean \
	cluster-build cluster-up cluster-down cluster-status cluster-test

all: build

## build: compile ./bin/hookbox (the lite build: every command but the
## Kubernetes and image-building ones, which it hands to bin/hookbox-kube, the
## full build, beside it), the container init (bin/hookbox-init) and the
## seed program of Kubernetes Jobs (bin/hookbox-seed), which hookbox finds next
## to itself, the static scripted engine and the scripted model API the
## cluster tests run as a pod; all static, -trimpath, so the
## images built from them have the same digests on every machine
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags hookbox_lite -ldflags '$(LDFLAGS)' -o bin/hookbox ./cmd/hookbox
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hookbox-kube ./cmd/hookbox
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/hookbox-init ./cmd/hookbox-init
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/containerd-shim-hookbox-v2 ./cmd/containerd-shim-hookbox-v2
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/hookbox-seed ./cmd/hookbox-seed
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/hookbox-scripted-engine ./cmd/hookbox-scripted-engine
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/hookbox-scripted-api ./cmd/hookbox-scripted-api

## setup: as root, install what runs need (containerd, runc) when missing
setup:
	@command -v runc >/dev/null && command -v containerd >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc; }

## demo: set up, build and run examples/hello.yaml in a container
demo: setup build
	HOOKBOX_PROGRESS=1 ./bin/hookbox run examples/hello.yaml

## real-engines: install the real engine CLIs the tests run (npm, pinned):
## one npm install of those whose entry file is missing (the paths are the
## *Engine constants of internal/testapi/...)
ENGINES_DIR := /opt/engines
ENGINES := \
  @anthropic-ai/claude-code@2.1.197=node_modules/@anthropic-ai/claude-code-linux-x64/claude \
  @openai/codex@0.171.0=node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex \
  @google/gemini-cli@0.61.0=node_modules/@google/gemini-cli/bundle/gemini.js \
  @mariozechner/pi-coding-agent@0.73.1=node_modules/@mariozechner/pi-coding-agent/dist/cli.js
real-engines:
	@missing=; for e in $(ENGINES); do \
	  test -x "$(ENGINES_DIR)/$${e#*=}" || missing="$$missing $${e%%=*}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing into $(ENGINES_DIR):$$missing"; \
	  mkdir -p $(ENGINES_DIR) && cd $(ENGINES_DIR) && npm install --no-audit --no-fund --silent --save-exact $$missing; \
	fi

## integration: only the root/containerd/runc tests, required to run
integration:
	HOOKBOX_INTEGRATION=1 $(GO) test -count=1 ./integration/

## bench: hookbox run vs ctr run --rm vs runc run, concurrent runs, exec
## storms against a bpftrace probe (installed with apt-get when missing),
## runfiles counts (root, containerd running); BENCH_ONLY=storm,... a subset,
## printed only
bench: build
	@command -v bpftrace >/dev/null || apt-get install -y bpftrace || echo "bench: bpftrace could not be installed; its exec probe is not compared"
	$(GO) run ./bench -hookbox bin/hookbox $(if $(BENCH_ONLY),-only $(BENCH_ONLY),-out bench/results.md)
	$(if $(BENCH_ONLY),@echo "bench: BENCH_ONLY=$(BENCH_ONLY): printed only; bench/results.md and bench/egress.txt are left as they are",$(GO) test -run '^$$' -bench 'ProxyThroughput|ConnectLatency|DownloadFromTestHost' -benchtime 3x ./egress/ | tee bench/egress.txt)

## test: unit tests, golden files, fuzz seed corpora (runs every Fuzz* seed);
## as root with HOOKBOX_INTEGRATION=1 (CI), also the rootless pass
test:
	$(GO) test -count=1 ./...
	@if [ "$$HOOKBOX_INTEGRATION" = 1 ] && [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory test-rootless; fi

## test-rootless: as root, run the Rootless* integration tests as a non-root
## user in a delegated cgroup subtree, with and without the tracer helper
test-rootless:
	bash integration/testdata/rootless.sh

## lint: gofmt, go vet, staticcheck, go.mod tidy (and k8svalidate's and cluster's), and the
## committed schema is current (tools/buildkitd is a separate module, left out)
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags hookbox_lite ./cmd/hookbox
	$(GO) run $(STATICCHECK) ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@cd k8svalidate && $(GO) mod tidy -diff >/dev/null || { echo "k8svalidate/go.mod is not tidy: cd k8svalidate && go mod tidy"; exit 1; }
	@cd cluster && $(GO) mod tidy -diff >/dev/null || { echo "cluster/go.mod is not tidy: cd cluster && go mod tidy"; exit 1; }
	@$(GO) run ./cmd/hookbox schema | cmp -s - schema/spawn.schema.json || \
	  { echo "schema/spawn.schema.json is stale: run make schema"; exit 1; }

## generate: rebuild the committed BPF object (apt: clang-14 llvm-14 libbpf-dev);
## make test checks ebpf/bpf/generated.sha256 against the sources, no clang needed
generate:
	$(GO) generate ./ebpf/

## vmlinux: refresh ebpf/bpf/vmlinux.h from this kernel's BTF (then make generate)
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > ebpf/bpf/vmlinux.h

## fmt: format the code
fmt:
	gofmt -w $$(git ls-files '*.go')

## schema: regenerate schema/spawn.schema.json from the Go spec types
schema:
	$(GO) run ./cmd/hookbox schema > schema/spawn.schema.json

## fuzz: run every fuzz target for FUZZTIME each (default 60s)
fuzz:
	$(GO) test ./compiler/ -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./compiler/ -run '^$$' -fuzz '^FuzzParseDestination$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/shellwords/ -run '^$$' -fuzz '^FuzzSplit$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/shellwords/ -run '^$$' -fuzz '^FuzzJoinRoundTrip$$' -fuzztime $(FUZZTIME)
	$(GO) test ./render/canonjson/ -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/config/ -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./render/canonjson/ -run '^$$' -fuzz '^FuzzMarshal$$' -fuzztime $(FUZZTIME)
	$(GO) test ./render/verify/ -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME)
	$(GO) test ./ebpf/ -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME)
	$(GO) test ./ebpf/ -run '^$$' -fuzz '^FuzzSplitArgv$$' -fuzztime $(FUZZTIME)
	$(GO) test ./ebpf/ -run '^$$' -fuzz '^FuzzEventJSON$$' -fuzztime $(FUZZTIME)

## cluster-build: build the single-node test cluster (module cluster/) into
## bin/cluster: Kubernetes v1.37.2 (kube-apiserver, kube-controller-manager,
## kube-scheduler, kubelet, kubectl) and hookbox-cluster (embedded etcd) in
## one go build, so they share compilation; containerd v2.4.2 (+ shim, ctr)
## and the CNI plugins v1.10.0 with go install, each with its own release's
## dependencies. Everything comes from the Go module proxy and stays in Go's
## build cache; nice, because the machine is shared.
CLUSTER_BIN   := bin/cluster
K8S_VERSION   := v1.37.2
CONTAINERD    := github.com/containerd/containerd/v2
CONTAINERD_VERSION := v2.4.2
CNI_PLUGINS   := github.com/containernetworking/plugins
CNI_VERSION   := v1.10.0
K8S_LDFLAGS   := $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
  -X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=37 -X $(p).gitTreeState=clean)
NICE          ?= nice -n 19
cluster-build:
	$(cluster-build-recipe)
	touch $(CLUSTER_STAMP)

# What cluster-up needs built: rebuilt when the cluster module or this
# Makefile changes (Go's build cache makes a rebuild a relink, about 95 s).
CLUSTER_STAMP := $(CLUSTER_BIN)/.built
$(CLUSTER_STAMP): cluster/go.mod cluster/go.sum $(shell find cluster -name '*.go' ! -name '*_test.go') Makefile
	$(cluster-build-recipe)
	touch $@

define cluster-build-recipe
	cd cluster && CGO_ENABLED=0 $(NICE) $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o ../$(CLUSTER_BIN)/ \
	  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl \
	  ./cmd/hookbox-cluster ./cmd/pause
	GOBIN=$(CURDIR)/$(CLUSTER_BIN) CGO_ENABLED=0 $(NICE) $(GO) install -trimpath \
	  -ldflags '-X $(CONTAINERD)/version.Version=$(CONTAINERD_VERSION)' \
	  $(CONTAINERD)/cmd/containerd@$(CONTAINERD_VERSION) $(CONTAINERD)/cmd/containerd-shim-runc-v2@$(CONTAINERD_VERSION) \
	  $(CONTAINERD)/cmd/ctr@$(CONTAINERD_VERSION)
	GOBIN=$(CURDIR)/$(CLUSTER_BIN)/cni CGO_ENABLED=0 $(NICE) $(GO) install -trimpath \
	  $(CNI_PLUGINS)/plugins/main/bridge@$(CNI_VERSION) $(CNI_PLUGINS)/plugins/ipam/host-local@$(CNI_VERSION) \
	  $(CNI_PLUGINS)/plugins/main/loopback@$(CNI_VERSION)
endef

## cluster-up: as root, start the cluster on loopback (etcd, containerd on
## /run/hookbox-cluster/containerd.sock, the control plane and a kubelet) and
## wait for the node to be Ready; KUBECONFIG=/var/lib/hookbox-cluster/admin.conf
cluster-up: $(CLUSTER_STAMP)
	$(CLUSTER_BIN)/hookbox-cluster up

## cluster-down: stop the cluster and remove its processes, mounts, bridge,
## cgroups and state
cluster-down:
	@test -x $(CLUSTER_BIN)/hookbox-cluster || { echo "$(CLUSTER_BIN)/hookbox-cluster is missing: make cluster-build"; exit 1; }
	$(CLUSTER_BIN)/hookbox-cluster down

cluster-status:
	$(CLUSTER_BIN)/hookbox-cluster status

## cluster-test: run the Job tests (cluster/*_test.go: examples/hello.yaml,
## real engines, a failing engine, a deadline, a refused host) on the
## running cluster (make cluster-up first); CGO_ENABLED=0 and -trimpath as
## in cluster-build, so the Kubernetes packages come from its build cache
cluster-test: build
	cd cluster && CGO_ENABLED=0 HOOKBOX_CLUSTER=1 $(GO) test -trimpath -count=1 -timeout 30m -v ./...

clean:
	rm -rf bin

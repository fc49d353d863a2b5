# ipkeeper build, test and demo entry points. `make test` is the one test
# command used by the README and by CI (.ci/run).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

GO          ?= go
TOOLS_BIN   := $(CURDIR)/.tools/bin
BIN         := $(CURDIR)/bin

CNI_PLUGINS_VERSION := v1.9.1
CNITOOL_VERSION     := v1.3.1
STATICCHECK_VERSION := v0.8.2

CNI_PLUGINS := bridge loopback host-local
CNI_PLUGIN_PKG_bridge     := github.com/containernetworking/plugins/plugins/main/bridge
CNI_PLUGIN_PKG_loopback   := github.com/containernetworking/plugins/plugins/main/loopback
CNI_PLUGIN_PKG_host-local := github.com/containernetworking/plugins/plugins/ipam/host-local

TOOLS := $(addprefix $(TOOLS_BIN)/,$(CNI_PLUGINS) cnitool staticcheck)

TEST_TIMEOUT ?= 60m
# PKGS narrows vet, staticcheck and tests, e.g. make test PKGS=./test/...
PKGS         ?= ./...
BENCH_N      ?= 300

.PHONY: all build tools sysdeps kube-apiserver kubelet containerd crictl node-tools test test-node fmtcheck vet staticcheck gotest demo bench bench-etcd bench-calico bench-controller bench-webui bench-storage bench-kube bench-scale image clean

all: build

# Static binaries (CGO_ENABLED=0), as in the image: a plugin exec then maps
# no libc and runs no dynamic loader, which costs less CPU per exec
# (measured in docs/BENCHMARKS.md).
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

tools: $(TOOLS)

$(TOOLS_BIN)/bridge $(TOOLS_BIN)/loopback $(TOOLS_BIN)/host-local:
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) $(GO) install $(CNI_PLUGIN_PKG_$(notdir $@))@$(CNI_PLUGINS_VERSION)

$(TOOLS_BIN)/cnitool:
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) $(GO) install github.com/containernetworking/cni/cnitool@$(CNITOOL_VERSION)

$(TOOLS_BIN)/staticcheck:
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# System packages the tests use, installed with apt when missing and we are
# root (CI, a fresh machine); otherwise the list of what is missing is
# printed and the tests that need it skip (or fail under CI=true).
#   ip, ping          network-namespace tests (iproute2, iputils-ping)
#   gcc, libc6-dev    go test -race needs cgo
#   strace            the durability test (result printed after fsync)
#   kubectl           the deploy/ and RBAC tests against a real API server
#   chromium          the address map's browser tests
#   runc, nsenter     the real node's runtime (test/node)
#   promtool          the alert rules' tests (Debian's prometheus package;
#                     the Prometheus service it brings is stopped and disabled)
SYSDEPS := ip:iproute2 ping:iputils-ping gcc:gcc /usr/include/stdio.h:libc6-dev \
	strace:strace kubectl:kubectl chromium:chromium runc:runc nsenter:util-linux \
	promtool:prometheus

sysdeps:
	@missing=""; \
	for dep in $(SYSDEPS); do \
		what=$${dep%%:*}; pkg=$${dep##*:}; \
		if [[ $$what == /* ]]; then [[ -e $$what ]] && continue; \
		else command -v $$what >/dev/null && continue; fi; \
		missing+=" $$pkg"; \
	done; \
	if [[ -z $$missing ]]; then exit 0; fi; \
	if [[ $$(id -u) != 0 ]]; then \
		echo "sysdeps: missing:$$missing (install them as root; tests that need them skip)"; exit 0; \
	fi; \
	echo "sysdeps: installing$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq -o DPkg::Lock::Timeout=600; \
	for pkg in $$missing; do \
		if [[ $$pkg == kubectl ]] && ! apt-cache show kubectl >/dev/null 2>&1; then pkg=kubernetes-client; fi; \
		apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends $$pkg; \
		if [[ $$pkg == prometheus ]]; then \
			systemctl disable --now prometheus >/dev/null 2>&1 || invoke-rc.d prometheus stop >/dev/null 2>&1 || true; \
		fi; \
	done

# A real kube-apiserver for the Kubernetes tests, built from the module proxy
# once per version into ~/.cache/ipkeeper (cold ~14 min, then instant).
kube-apiserver:
	@scripts/kube-apiserver.sh >/dev/null

# The real node's binaries (test/node), built from the module proxy once
# per version into the same cache: a kubelet (cold ~15 min, less after
# kube-apiserver's build), containerd 2.x with its runc shim and ctr, and
# crictl.
kubelet:
	@scripts/kubelet.sh >/dev/null

containerd:
	@scripts/containerd.sh >/dev/null

crictl:
	@scripts/crictl.sh >/dev/null

node-tools: kubelet containerd crictl

# The real-node tests alone (as root): containerd, a kubelet and ipkeeper
# running pods, against a real kube-apiserver.
test-node: sysdeps tools kube-apiserver node-tools
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -v ./test/node/

fmtcheck:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck: $(TOOLS_BIN)/staticcheck
	$(TOOLS_BIN)/staticcheck $(PKGS)

# Browser tests keep their screenshots in bin/artifacts (IPKEEPER_ARTIFACTS).
# The real-node tests (test/node) run here with the rest, and alone in
# `make test-node`.
gotest:
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) IPKEEPER_ARTIFACTS=$${IPKEEPER_ARTIFACTS:-$(BIN)/artifacts} $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test: sysdeps tools kube-apiserver node-tools build
	$(MAKE) --no-print-directory fmtcheck
	$(MAKE) --no-print-directory vet
	$(MAKE) --no-print-directory staticcheck
	$(MAKE) --no-print-directory gotest

demo: build
	BIN=$(BIN) scripts/demo.sh

bench: build $(TOOLS_BIN)/host-local
	$(GO) run ./test/bench/cmd/procbench -ipkeeper $(BIN)/ipkeeper -host-local $(TOOLS_BIN)/host-local -n $(BENCH_N)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/ipam/

# The etcd datastore against an embedded etcd: raw CAS ceiling, allocations
# at concurrency 1/8/64 over 50 nodes, one hot node, plugin processes vs
# host-local, and the 5 000-node scale run.
# BENCH_BASELINE=<commit> also runs the plugin as built at that commit
# (scripts/baseline-plugin.sh) next to the current one, with ratios; e.g.
# fe540ff, the last commit of the first storage layout.
bench-etcd: build $(TOOLS_BIN)/host-local
	$(GO) run ./test/bench/etcd -ipkeeper $(BIN)/ipkeeper -host-local $(TOOLS_BIN)/host-local -scale \
		$(if $(BENCH_BASELINE),-baseline $$(scripts/baseline-plugin.sh $(BENCH_BASELINE)))

# ipkeeper's allocator against Calico's IPAM library (libcalico-go, etcdv3
# backend) on one embedded etcd, interleaved: W1-W4, raw CAS, density rows,
# bytes and etcd growth per ADD (test/bench/calico); the same library on
# its Kubernetes backend beside ipkeeper's kube store on one kube-apiserver,
# dual-stack ADDs at 10-2 000 pods on a node (-kube); then ipkeeper's plugin
# against Calico's calico-ipam as CNI processes on one etcd and one node,
# ADD and DEL in a row and from 16 at once (test/bench/calico/proc). The
# module proxy serves neither Calico v3.32.1 nor github.com/projectcalico/api,
# so Calico's side and calico-ipam are built from CALICO_SRC, a checkout (or
# git directory) of github.com/projectcalico/calico holding tag
# CALICO_VERSION, once into ~/.cache/ipkeeper; without it only ipkeeper's
# side of the library rows runs.
# BENCH_CALICO_FLAGS="-scale 0.1" for a quick run;
# BENCH_CALICO_PROC_FLAGS="-n 100 -conc-n 160" for a quick process run;
# BENCH_CALICO_KUBE_FLAGS="-kube-pods 10,100 -window 10" for a quick -kube run.
CALICO_SRC              ?=
CALICO_VERSION          ?= v3.32.1
BENCH_CALICO_FLAGS      ?=
BENCH_CALICO_PROC_FLAGS ?=
BENCH_CALICO_KUBE_FLAGS ?=
bench-calico: build kube-apiserver
	calico=""; ipam=""; \
	if [[ -n "$(CALICO_SRC)" ]]; then \
		calico=$$(CALICO_VERSION=$(CALICO_VERSION) test/bench/calico/side/build.sh "$(CALICO_SRC)") || \
			echo "bench-calico: Calico's side did not build (above); running ipkeeper's side only" >&2; \
		ipam=$$(CALICO_VERSION=$(CALICO_VERSION) test/bench/calico/side/build-ipam.sh "$(CALICO_SRC)") || \
			echo "bench-calico: calico-ipam did not build (above); no process rows" >&2; \
	fi; \
	$(GO) run ./test/bench/calico -calico "$$calico" $(BENCH_CALICO_FLAGS) && \
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) $(GO) run ./test/bench/calico -kube -calico "$$calico" $(BENCH_CALICO_KUBE_FLAGS) && \
	if [[ -n "$$calico" && -n "$$ipam" ]]; then \
		$(GO) run ./test/bench/calico/proc -ipkeeper $(BIN)/ipkeeper -calico-ipam "$$ipam" -calicoside "$$calico" $(BENCH_CALICO_PROC_FLAGS); \
	fi

# ipkeeper-controller's reclaim against a real kube-apiserver: nodes x pods
# allocated, 5% deleted without DEL, time from the deletes to the last
# release, the controller's API requests, CPU and peak memory. The default
# is 100 x 50 pods; BENCH_CONTROLLER_FLAGS="-nodes 1000" for the issue's
# 1 000 x 50.
BENCH_CONTROLLER_FLAGS ?=
bench-controller: build kube-apiserver
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) $(GO) run ./test/bench/controller -controller $(BIN)/ipkeeper-controller $(BENCH_CONTROLLER_FLAGS)

# The address map at 5 000 nodes x 110 pods in an embedded etcd: the map's
# first read, API answer times, page load in headless chromium (Debian's
# chromium package), a live ADD and the first answers after a DEL.
bench-webui:
	$(GO) run ./test/bench/webui -nodes 5000 -pods 110

# Allocation on the typed storage contract on a bbolt file, embedded etcd and a
# kube-apiserver, against raw etcd (one CAS of a node's key per ADD and per
# DEL) on the same etcd, cold (a process per operation) and warm (a
# long-lived process), with ratios.
BENCH_STORAGE_FLAGS ?=
bench-storage: kube-apiserver
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) $(GO) run ./test/bench/storage $(BENCH_STORAGE_FLAGS)

# ADD (then DEL) through the Kubernetes API as plugin processes at
# concurrency 1/8/64 over 20 nodes, one kube-apiserver: ipkeeper on the
# kubernetes datastore (node ServiceAccount), on an embedded etcd, and
# whereabouts (built from its module once into ~/.cache/ipkeeper, admin
# kubeconfig); the goal ratios and 1 000 ADDs. BENCH_KUBE_FLAGS="-n 300".
BENCH_KUBE_FLAGS ?=
bench-kube: build kube-apiserver
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) $(GO) run ./test/bench/kube -bin $(BIN) $(BENCH_KUBE_FLAGS)

# A simulated cluster on the kubernetes datastore of a real kube-apiserver:
# nodes x 110 dual-stack pods (Node and Pod objects through the API, the
# allocations through the store contract), the controller with its map, and
# agents with the plugin on a few nodes, as processes, under a steady pod
# churn with leaks and deleted nodes; every figure with its goal and "met"
# or "missed" (test/bench/scale). The default is 500 nodes;
# BENCH_SCALE_FLAGS="-nodes 5000" for the goal scale.
BENCH_SCALE_FLAGS ?=
bench-scale: build kube-apiserver
	IPKEEPER_KUBE_APISERVER=$$(scripts/kube-apiserver.sh) $(GO) run ./test/bench/scale -bin $(BIN) $(BENCH_SCALE_FLAGS)

# The container image as an OCI layout in bin/oci, built without a container
# daemon (static binaries in /usr/local/bin; see deploy/Dockerfile).
image:
	$(GO) run ./tools/image -o $(BIN)/oci

clean:
	rm -rf $(BIN)

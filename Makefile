# Two commands on a fresh Debian 12 machine: `make demo` and `make test` (see README).
.PHONY: setup vm-paths test demo lint unit lab vm bench bench-suite bench-check docs-check clean \
	man completion wheel deb

VENV := .venv
TOX := $(VENV)/bin/tox
# What `make man` and `make completion` run lbtune's tree with (a package build may pass its
# own, with click installed) and where they write (a package build copies from there).
PYTHON ?= $(VENV)/bin/python
BUILD ?= build

setup:
	bash scripts/setup.sh

# The VM guest mounts its own /tmp and /run over the host's: a checkout there cannot run the
# vm tier, so `make test` and `make vm` refuse it in one line before set-up and any tier
# (lbtune.lab.guests.vm.hidden_from_guest; the system python3, before the venv exists).
vm-paths:
	@if command -v python3 >/dev/null 2>&1; then \
	  PYTHONPATH="$(CURDIR)" python3 -m lbtune.lab.guests.vm "$(CURDIR)"; fi

# Two tiers at a time (tox.ini says which wait for which); a failing tier's output is printed
# in full when it ends, and the summary lists every tier.
test: vm-paths setup
	$(TOX) run-parallel -p 2 -e vm,py,lab,lint

unit: setup
	$(TOX) run -e py

lab: setup
	$(TOX) run -e lab

vm: vm-paths setup
	$(TOX) run -e vm

lint: setup
	$(TOX) run -e lint

demo: setup
	$(VENV)/bin/lbtune show
	$(VENV)/bin/lbtune doctor
	-$(VENV)/bin/lbtune diagnose --duration 3
	@# A short probe run where root and bcc allow it; otherwise one line says why not.
	@if [ "$$(id -u)" -ne 0 ]; then echo "demo: skipping lbtune probe (needs root)"; \
	elif ! $(VENV)/bin/python -c 'import bcc' 2>/dev/null || [ -n "$$LBTUNE_NO_BCC" ]; then \
	  echo "demo: skipping lbtune probe (bcc not importable: make setup installs python3-bpfcc)"; \
	else $(VENV)/bin/lbtune probe drops napi --duration 3 || true; fi
	$(VENV)/bin/lbtune lab run --duration 10

# Every bench script (tests/unit/test_bench_settings.py checks the list), then the stale check.
bench: setup
	$(VENV)/bin/python bench/run.py
	$(VENV)/bin/python bench/completion.py
	$(VENV)/bin/python bench/tune.py
	$(VENV)/bin/python bench/diagnose.py
	$(VENV)/bin/python bench/lab.py
	$(VENV)/bin/python bench/probes.py
	$(VENV)/bin/python bench/ipvs.py
	$(VENV)/bin/python bench/ipvs_profile.py
	$(VENV)/bin/python bench/monitor.py
	$(VENV)/bin/python bench/monitor_replay.py
	$(VENV)/bin/python bench/monitor_memory.py
	$(VENV)/bin/python bench/adapt.py
	$(VENV)/bin/python bench/agent_scale.py
	$(VENV)/bin/python bench/receive_faults.py
	$(VENV)/bin/python bench/exporter.py
	$(VENV)/bin/python bench/watch_profile.py
	$(VENV)/bin/python bench/ansible.py
	$(VENV)/bin/python bench/failover.py
	$(VENV)/bin/python bench/cluster.py
	$(VENV)/bin/python bench/vm.py
	$(VENV)/bin/python bench/vm_apply.py
	$(VENV)/bin/python bench/nic_spread.py
	$(VENV)/bin/python bench/nic_apply.py
	$(VENV)/bin/python bench/lab_up_vm.py
	$(VENV)/bin/python bench/vm_rx.py
	$(VENV)/bin/python bench/vm_soak.py
	$(VENV)/bin/python bench/units.py
	$(VENV)/bin/python scripts/render_docs.py --write
	$(VENV)/bin/python bench/check.py

# Which results in bench/results were measured at code that has changed since (exit 1 lists
# them: re-measure those before a release); --json for a machine-readable list.
bench-check:
	python3 bench/check.py

# README and docs numbers are rendered from bench/results: exit 1 lists what differs.
docs-check:
	python3 scripts/render_docs.py --check

# The whole suite's time: `CI=true make test` in a fresh clone (~30 min; not part of `make bench`).
bench-suite: setup
	$(VENV)/bin/python bench/suite.py

# lbtune(8) and lbtune-COMMAND(8) from the command definitions (scripts/manpages.py):
# `man -l $(BUILD)/man/lbtune-apply.8`; a package installs them under /usr/share/man/man8.
man:
	PYTHONPATH="$(CURDIR)" $(PYTHON) scripts/manpages.py --out "$(BUILD)/man"

# The Tab-completion scripts, named as a package installs them:
# /usr/share/bash-completion/completions/lbtune, /usr/share/zsh/vendor-completions/_lbtune,
# /usr/share/fish/vendor_completions.d/lbtune.fish (lbtune.cli.complete.INSTALL_PATHS).
completion:
	mkdir -p "$(BUILD)/completion"
	PYTHONPATH="$(CURDIR)" $(PYTHON) -m lbtune completion bash > "$(BUILD)/completion/lbtune"
	PYTHONPATH="$(CURDIR)" $(PYTHON) -m lbtune completion zsh > "$(BUILD)/completion/_lbtune"
	PYTHONPATH="$(CURDIR)" $(PYTHON) -m lbtune completion fish > "$(BUILD)/completion/lbtune.fish"

# The wheel `pipx install build/dist/lbtune-*.whl` takes, and the Debian 12 package
# (build/lbtune_VERSION_all.deb: docs/install.md), both built from the wheelhouse that
# `make setup` fills (scripts/wheelhouse.sh), without network.
wheel:
	$(PYTHON) scripts/deb.py wheel --build "$(BUILD)"

deb: man completion
	$(PYTHON) scripts/deb.py deb --build "$(BUILD)"

clean:
	rm -rf .tox .pytest_cache .mypy_cache .ruff_cache build dist

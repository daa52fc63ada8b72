# Two commands on a fresh Debian 12 machine: `make demo` and `make test` (see README).
.PHONY: setup test demo lint unit lab bench clean

VENV := .venv
TOX := $(VENV)/bin/tox

setup:
	bash scripts/setup.sh

test: setup
	$(TOX) run -e py,lab,lint

unit: setup
	$(TOX) run -e py

lab: setup
	$(TOX) run -e lab

lint: setup
	$(TOX) run -e lint

demo: setup
	$(VENV)/bin/lbtune show
	$(VENV)/bin/lbtune doctor
	-$(VENV)/bin/lbtune diagnose --duration 3

bench: setup
	$(VENV)/bin/python bench/run.py
	$(VENV)/bin/python bench/tune.py
	$(VENV)/bin/python bench/diagnose.py

clean:
	rm -rf .tox .pytest_cache .mypy_cache .ruff_cache build dist

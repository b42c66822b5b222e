# `make demo` and `make test` work on a fresh machine: they create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WORKDIR ?= runs/quick

.PHONY: demo test test-all smoke bench clean

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m experiments.run --config=experiments/configs/quick.py --workdir=$(WORKDIR)

smoke: $(VENV)/.installed
	$(PY) -m experiments.run --config=experiments/configs/smoke.py --workdir=runs/smoke

bench: $(VENV)/.installed
	$(PY) -m bench.run $(BENCH_FLAGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-all: $(VENV)/.installed
	$(PY) -m pytest -q -m ""

clean:
	rm -rf $(VENV) runs

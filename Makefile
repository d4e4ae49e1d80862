# The two commands of the README: `make run` and `make test`. Both create .venv and
# install the project on a fresh machine by themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Main job on the built-in default. Until the harness lands, it simulates the
# hand-written example graph on the default paper cluster, on one GPU and spread out.
run: $(STAMP)
	$(BIN)/eagle-sim simulator/examples/mlp_step.json --cluster p100x4 --device gpu0
	@echo
	$(BIN)/eagle-sim simulator/examples/mlp_step.json --cluster p100x4 \
		--placement simulator/examples/mlp_step.placement.json

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/simulator_speed.py
	$(BIN)/python tests/benchmarks/capture_speed.py

lint: $(STAMP)
	$(BIN)/ruff check eagle simulator suites tests
	$(BIN)/ruff format --check eagle simulator suites tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis

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

# Main job on the built-in default: the non-learning placers on every suite, on the
# default paper cluster (experiment=baselines), then the comparison table. The first run
# captures the three suites (about 2 minutes); rerunning resumes the finished runs.
RUN_DIR ?= runs/main
run: $(STAMP)
	$(BIN)/eagle-run -m experiment=baselines hydra.sweep.dir=$(RUN_DIR)
	$(BIN)/eagle-report $(RUN_DIR)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/simulator_speed.py
	$(BIN)/python tests/benchmarks/eval_speed.py
	$(BIN)/python tests/benchmarks/capture_speed.py
	$(BIN)/python tests/benchmarks/rl_speed.py
	$(BIN)/python tests/benchmarks/search_speed.py

# results/'s scripts (the measurements behind the docs) are checked too: they call the
# packages' internals, and an unchecked one had fallen behind a changed signature
lint: $(STAMP)
	$(BIN)/ruff check eagle simulator suites tests results
	$(BIN)/ruff format --check eagle simulator suites tests results
	$(BIN)/mypy
	$(BIN)/mypy --follow-imports=silent results/fidelity/*.py results/toys/*.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis

# tff_meta: `make demo` and `make test` set up what is missing, then run.
PYTHON_SYS ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Test processes (pytest-xdist; files stay whole on one process). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

.PHONY: demo test test-fast setup clean-venv lint

$(STAMP): requirements.txt
	@command -v $(PYTHON_SYS) >/dev/null || { echo "Python 3.11 is needed (TFF 0.87 supports 3.9-3.11); set PYTHON_SYS=/path/to/python3.11"; exit 1; }
	@test -x $(PY) || $(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip<25" 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -m pip install -q --no-deps -r requirements.txt 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -c "from tff_meta.core import startup; startup.import_tensorflow(); import tensorflow_federated, tensorflow_datasets, sklearn, pandas, matplotlib, nbclient, xdist"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m programs.compare --config=configs/demo/digits.toml --seeds=3 $(ARGS)

# --durations=30: each run's log names its slowest tests (a file's total bounds --dist loadfile).
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30 tests $(ARGS)

# The quick tier: tests marked slow (subprocess programs, worker pools, notebooks, multi-round
# training; pyproject.toml's markers) left out.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests $(ARGS)

clean-venv:
	rm -rf $(VENV)

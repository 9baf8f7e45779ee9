# Everything a fresh machine needs: `make demo` runs the demo, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-load lint install gpu-check

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/torchdoctor demo

# --durations=15: CI's output names the slowest tests, so a test that grows is seen (issue 38).
# Two streams at once, one test each at a time: the end-to-end tests no load changes, and beside
# them the timing-marked ones (each beside one other test, about one busy core, as in test-load)
# and the unit tests. Serial, the suite used 0.8 of a core on average: it waits on its scripts'
# processes. The second stream's output follows the first's.
test: $(STAMP)
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/torchdoctor-tests.XXXXXX"); \
	$(PY) -m pytest -m "timing or not integration" --durations=15 -p no:cacheprovider \
		--basetemp="$$tmp/timing" > "$$tmp/timing.log" 2>&1 & timing=$$!; \
	$(PY) -m pytest -m "integration and not timing" --durations=15 --basetemp="$$tmp/e2e"; e2e=$$?; \
	wait $$timing; timed=$$?; \
	echo; echo "=== beside them: the timing-marked tests and the unit tests ==="; \
	cat "$$tmp/timing.log"; rm -rf "$$tmp"; \
	test $$e2e -eq 0 && test $$timed -eq 0

# The edit-test loop: unit tests only, under a minute.
test-fast: $(STAMP)
	$(PY) -m pytest tests/unit -m "not slow and not integration" -q

# The tests that assert on measured durations, beside a process that keeps one core busy.
test-load: $(STAMP)
	$(PY) -m pytest -m timing --cpu-hog --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# On a machine with a CUDA GPU: the gpu- and accelerator-marked tests and the figures only a GPU
# gives (benchmarks/gpu_check.py); elsewhere it says so and exits 0.
gpu-check: $(STAMP)
	PYTHONPATH=src $(PY) benchmarks/gpu_check.py

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
# Three workers (pytest-xdist) for the tests no load changes: serial, the suite used 0.8 of a
# core on average (it waits on its scripts' processes: bounds, stalls, ranks meeting); on two
# workers 1.3 of the 2 cores (392 s), on three 1.6 (345 s). Work stealing: a worker that runs
# out takes tests from another's queue, so the 40 s tests near a file's end do not leave two
# workers idle (328 s with xdist's default batches, 297 s stealing; four workers were slower,
# 309 s). Then the timing-marked ones, one at a time.
test: $(STAMP)
	$(PY) -m pytest -n 3 --dist worksteal -m "not timing" --durations=15
	$(PY) -m pytest -m timing --durations=15

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

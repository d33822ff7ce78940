# Two commands: `make test` and `make demo`. Both create .venv if missing and
# install the package editable against constraints.txt (torch==2.13.0 CPU).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo setup lint bench bench-speed clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	TORCHNEURON_COMPILE_LATENCY=0 $(PY) -m pytest

demo: $(STAMP)
	$(PY) examples/quickstart.py

lint: $(STAMP)
	$(VENV)/bin/ruff check torchneuron tests examples tools

bench: $(STAMP)
	$(PY) -m pytest benchmarks --benchmark-only -s -p no:logging

# The simulator's own wall-clock speed (issue 11): µs per aten op, eager vs plain CPU,
# and ms per training step eager / compiled / adaptive, printed side by side.
bench-speed: $(STAMP)
	$(PY) -m pytest benchmarks/test_speed.py --benchmark-only -s -p no:logging -q $(BENCH_SPEED_ARGS)

clean:
	rm -rf $(VENV)

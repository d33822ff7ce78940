# `make bench` sets everything up and runs the main job (the quick benchmark report into
# results/); `make test` and `make demo` as before. Every target creates .venv if missing
# and installs the package editable against constraints.txt (torch==2.13.0 CPU).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
RESULTS ?= results

.PHONY: test test-cpus demo setup lint bench bench-full bench-whole bench-host bench-speed clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

# The bench also runs the zoo's Hugging Face GPT-2 (optional extra `hf`: transformers).
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test,hf]"
	touch $(BENCH_STAMP)

setup: $(STAMP)

# One pytest worker per core (pytest-xdist; each test is independent of the others).
test: $(STAMP)
	TORCHNEURON_COMPILE_LATENCY=0 $(PY) -m pytest -n auto --dist worksteal

# The bit-for-bit test files again at other CPU code paths (ATen's default and avx2, every
# oneDNN level below this CPU's), each in its own process: the tests marked cpu_paths,
# which make test leaves out for its time. CI (.ci/run) runs both.
test-cpus: $(STAMP)
	TORCHNEURON_COMPILE_LATENCY=0 $(PY) -m pytest -n auto --dist worksteal -m cpu_paths \
		tests/compiler/test_bits_per_cpu_capability.py

demo: $(STAMP)
	$(PY) examples/quickstart.py

# ruff, then the size report (tools/sz.py: lines per module and folder; fails when a module
# is over 600 lines).
lint: $(STAMP)
	$(VENV)/bin/ruff check torchneuron tests examples tools benchmarks
	$(PY) tools/sz.py

# The quick report: every model in every mode, results/report.{md,json} and chart.png.
bench: $(BENCH_STAMP)
	$(VENV)/bin/torchneuron-bench --quick --out $(RESULTS)

# The full report (more steps) with a Chrome trace of one steady step per model and mode.
bench-full: $(BENCH_STAMP)
	$(VENV)/bin/torchneuron-bench --out $(RESULTS)/full --trace

# Issue 20's whole-run report: each training model until adaptive eager's last tier is in
# (--steps auto), eager and torch.compile as many steps; report.md states per model whether
# adaptive eager's cumulative time stays at or below theirs. Long: 52 CPU-minutes measured
# (README, "--steps auto"), so not part of bench-full.
bench-whole: $(BENCH_STAMP)
	$(VENV)/bin/torchneuron-bench --models mlp,cnn,gpt,gru,hf_gpt2 \
		--modes eager,adaptive_cold,compile --steps auto --max-steps 20000 --timeout 7200 \
		--out $(RESULTS)/whole

# Host (wall-clock) overhead: pytest-benchmark, eager dispatch per op vs plain CPU, compile
# stages, adaptive-eager recording and replay per op. Not part of `make test`.
bench-host: $(STAMP)
	$(PY) -m pytest benchmarks --benchmark-only -s -p no:logging

# The simulator's own wall-clock speed (issue 11): µs per aten op, eager vs plain CPU,
# and ms per training step eager / compiled / adaptive, printed side by side.
bench-speed: $(STAMP)
	$(PY) -m pytest benchmarks/test_speed.py --benchmark-only -s -p no:logging -q $(BENCH_SPEED_ARGS)

clean:
	rm -rf $(VENV)

"""The bit-for-bit test files at every CPU code path this machine offers, one process each.

Why: eager's bits depend on ATen's vector loops (``ATEN_CPU_CAPABILITY``) and on the
oneDNN kernels eager calls (``ONEDNN_MAX_CPU_ISA``); a compiled or replayed result must
equal eager's on whichever CPU runs it, and CI gets whatever CPU it is given. ``make
test`` reruns the files at ATen's other capabilities and a few oneDNN levels
(``tests/compiler/test_bits_per_cpu_capability.py``); this tool runs them at every path,
too long for ``make test`` (a few CPU-minutes per path), and prints one row per path:

  onednn  every oneDNN level the CPU offers, ATen at this CPU's own capability: what
          oneDNN's kernel choice alone changes
  cpus    every oneDNN level with the ATen capability a CPU of that level has (SSE41 and
          AVX with ``default``, AVX2 and AVX2_VNNI with ``avx2``, the AVX-512 levels with
          ``avx512``): the pairs real CPUs give
  aten    every ATen capability, oneDNN uncapped
  all     the three, each pair once (the default)

The paths and the files are ``tests/cpu_paths.py``'s (its docstring: what the caps do
not imitate). Each row also shows the ISA oneDNN reports it runs at (its verbose
``isa:`` line), so a cap that did not take is seen.

Usage::

    python tools/cpu_paths.py [--paths all|onednn|cpus|aten] [--only AVX2,avx2+AVX2_VNNI]
        [--onednn-tests] [--jobs N] [--json out.json] [pytest file or node ...]
    python tools/cpu_paths.py --list-onednn [--jobs N] [pytest file or node ...]

``--jobs`` runs each path's pytest with that many xdist workers (1: in one process);
files or node ids after the options replace the bit-for-bit files, ``--onednn-tests``
replaces them with ``cpu_paths.ONEDNN_TESTS`` (the tests that run oneDNN: at the
``onednn`` paths nothing else can change). Exit status 1 when any path fails.
``--list-onednn`` runs the bit-for-bit files once at this CPU's own path with oneDNN's
verbose output on and prints the test functions that ran a oneDNN primitive, with the
kernels: the list ``ONEDNN_TESTS`` is to hold.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import cpu_paths  # noqa: E402

_ISA_PROBE = ("import torch\n"
              "with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):\n"
              "    torch.nn.functional.conv2d(torch.ones(16, 1, 4, 4), torch.ones(1, 1, 3, 3))\n")


@dataclass
class Row:
    name: str
    aten: str
    onednn: str
    onednn_isa: str
    passed: int
    failed: int
    seconds: float
    failures: list[str]


def paths(kind: str) -> list[tuple[str, str, str]]:
    """(name, ATen capability, oneDNN level) of every path of ``kind``, each pair once."""
    own_aten = cpu_paths.aten_capabilities()[-1]
    levels = cpu_paths.onednn_levels()
    if not levels:
        raise SystemExit("no oneDNN level found in /proc/cpuinfo's flags: this tool runs "
                         "on x86-64 Linux; run the tests directly elsewhere")
    own_onednn = levels[-1]
    pairs: list[tuple[str, str]] = []
    if kind in ("onednn", "all"):
        pairs += [(own_aten, level) for level in levels]
    if kind in ("cpus", "all"):
        caps = cpu_paths.aten_capabilities()
        pairs += [(cpu_paths.aten_for(level) if cpu_paths.aten_for(level) in caps
                   else own_aten, level) for level in levels]
    if kind in ("aten", "all"):
        pairs += [(cap, own_onednn) for cap in cpu_paths.aten_capabilities()]
    seen: dict[tuple[str, str], None] = dict.fromkeys(pairs)
    return [(f"{aten}+{level}", aten, level) for aten, level in seen]


def onednn_isa(env: dict[str, str]) -> str:
    """The ISA oneDNN says it runs at in a process with ``env``."""
    run = subprocess.run([sys.executable, "-c", _ISA_PROBE], env=env, capture_output=True,
                         text=True, timeout=300)
    found = re.search(r"isa:([^\n]*)", run.stdout)
    return found.group(1).strip() if found else "?"


def run_path(name: str, aten: str, level: str, targets: list[str], jobs: int) -> Row:
    """The targets' tests in one pytest process (and its workers) at one path."""
    env = {**cpu_paths.path_env(aten, level), "PYTHONPATH": str(ROOT),
           "TORCHNEURON_COMPILE_LATENCY": "0", "TORCHNEURON_COMPILE_IN_PROCESS": "1"}
    isa = onednn_isa(env)
    workers = ["-p", "no:xdist"] if jobs <= 1 else ["-n", str(jobs)]
    start = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *workers,
         "-m", "not same_on_every_cpu", *targets],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=7200)
    seconds = time.monotonic() - start
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error)", run.stdout)}
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", run.stdout, re.M)
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if run.returncode != 0 and not failed:  # pytest itself failed (collection, usage)
        failures, failed = [run.stdout[-2000:] + run.stderr[-2000:]], 1
    return Row(name, aten, level, isa, counts.get("passed", 0), failed, round(seconds, 1),
               failures)


def list_onednn(jobs: int, targets: list[str]) -> int:
    """Print the test functions of ``targets`` that run a oneDNN primitive."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "onednn.tsv"
        env = {**cpu_paths.path_env(None, None), "PYTHONPATH": str(ROOT),
               "TORCHNEURON_COMPILE_LATENCY": "0", "ONEDNN_VERBOSE": "1",
               "CPU_PATHS_ONEDNN_OUT": str(out)}
        workers = ["-p", "no:xdist"] if jobs <= 1 else ["-n", str(jobs)]
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
             "tests.cpu_paths", *workers, "-m", "not same_on_every_cpu", *targets],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=7200)
        print(run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:])
        kernels: dict[str, set[str]] = {}
        for line in out.read_text().splitlines() if out.exists() else []:
            node, found = line.split("\t")
            kernels.setdefault(node.split("[")[0], set()).update(found.split())
    for test in sorted(kernels):
        print(f"{test.removeprefix('tests/')}\t{' '.join(sorted(kernels[test]))}")
    listed = set(cpu_paths.onednn_tests())
    print(f"# {len(kernels)} test functions ran oneDNN; not in ONEDNN_TESTS: "
          f"{sorted(set(kernels) - listed) or 'none'}; in it, not seen: "
          f"{sorted(listed - set(kernels)) or 'none'}")
    return run.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default="all", choices=("all", "onednn", "cpus", "aten"))
    parser.add_argument("--only", default="", help="comma-separated path names or levels")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default="")
    parser.add_argument("--onednn-tests", action="store_true",
                        help="run cpu_paths.ONEDNN_TESTS instead of the bit-for-bit files")
    parser.add_argument("--list-onednn", action="store_true",
                        help="list the tests of the bit-for-bit files that run oneDNN")
    parser.add_argument("targets", nargs="*", help="pytest files or node ids")
    args = parser.parse_args(argv)
    if args.list_onednn:
        return list_onednn(args.jobs, args.targets or cpu_paths.BIT_FILES)
    chosen = paths(args.paths)
    if args.only:
        wanted = set(args.only.split(","))
        chosen = [p for p in chosen if wanted & {p[0], p[1], p[2]}]
    targets = args.targets or (cpu_paths.onednn_tests() if args.onednn_tests
                               else cpu_paths.BIT_FILES)
    print(f"{len(targets)} targets at {len(chosen)} paths; oneDNN levels offered: "
          f"{', '.join(cpu_paths.onednn_levels())}", flush=True)
    rows = []
    print(f"{'path':<28} {'oneDNN reports':<36} {'passed':>6} {'failed':>6} {'seconds':>8}")
    for name, aten, level in chosen:
        row = run_path(name, aten, level, targets, args.jobs)
        rows.append(row)
        print(f"{name:<28} {row.onednn_isa[:36]:<36} {row.passed:>6} {row.failed:>6} "
              f"{row.seconds:>8.1f}", flush=True)
        for failure in row.failures:
            print(f"    {failure}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

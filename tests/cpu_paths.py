"""The CPU code paths eager's bits depend on, and the test files that assert those bits.

Why one module: eager's float results depend on which kernel the CPU runs, and two
libraries choose independently. ATen picks its vector loops by ``ATEN_CPU_CAPABILITY``
(default, avx2, avx512); oneDNN, which eager calls for float32 convolutions of a batch,
half-precision products and convolutions, and the LSTM layer, picks its JIT kernels (so
its blocking and summation order) by the highest ISA it may use, capped by
``ONEDNN_MAX_CPU_ISA``. A CI machine gets whatever pair its CPU offers. The rerun test
(``tests/compiler/test_bits_per_cpu_capability.py``) and the table tool
(``tools/cpu_paths.py``) both take the paths and the files from here, so the two check
the same thing.

Capping either library is only possible downwards (ATen dies of an illegal instruction
on a capability the CPU lacks; oneDNN clamps a level above the CPU's to the CPU's), so
the levels offered are read from the CPU's flags first. What the caps do not imitate:
ATen's own oneDNN choices (``mkldnn_bf16_device_check``: a bfloat16 product or
convolution goes to oneDNN when the CPU has AVX-512 BW/VL/DQ or AMX, read from the CPU
itself) stay this machine's under every cap, and MKL's BLAS (float32/float64 products)
has its own dispatch (``MKL_ENABLE_INSTRUCTIONS``), not rerun here.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Under tests/: the compiler's bit-for-bit files, and the others whose bits a CPU path
# changed (a full `make test` at ATEN_CPU_CAPABILITY=default failed in each of these
# before their fixes: premises of a test or lowerings tuned to the vector loops)
BIT_PATTERNS = (
    "compiler/test_exact_*.py", "compiler/test_special_values*.py",
    "compiler/test_int_avg_pool_eager.py", "compiler/test_half_conv_refused.py",
    "compiler/test_interpolate_exact.py", "compiler/test_assorted_exact_ops.py",
    "compiler/test_sweep*_fixes.py", "compiler/test_rounding.py", "compiler/test_fft.py",
    "compiler/test_decomp_foreach.py", "compiler/test_addcdiv_addcmul.py",
    "compiler/interpreter/test_interpreter_collapse*.py", "device/test_*_cpu_bits.py",
    "adaptive_eager/test_ae_foreach_ema.py", "adaptive_eager/test_ae_divergence.py")
BIT_FILES = sorted({str(p.relative_to(ROOT)) for pattern in BIT_PATTERNS
                    for p in (ROOT / "tests").glob(pattern)})

# oneDNN's ``ONEDNN_MAX_CPU_ISA`` levels in its order, each with the level it extends and
# the /proc/cpuinfo flags it needs beyond that one (oneDNN's ``dnnl_cpu_isa_t`` bits: the
# AVX-512 levels extend AVX2, not AVX2_VNNI, so a Skylake-X or a Zen 4 offers
# AVX512_CORE without AVX2_VNNI).
ONEDNN_LEVELS: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("SSE41", None, ("sse4_1",)),
    ("AVX", "SSE41", ("avx",)),
    ("AVX2", "AVX", ("avx2",)),
    ("AVX2_VNNI", "AVX2", ("avx_vnni",)),
    ("AVX2_VNNI_2", "AVX2_VNNI", ("avx_vnni_int8", "avx_ne_convert")),
    ("AVX512_CORE", "AVX2", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
    ("AVX512_CORE_VNNI", "AVX512_CORE", ("avx512_vnni",)),
    ("AVX512_CORE_BF16", "AVX512_CORE_VNNI", ("avx512_bf16",)),
    ("AVX10_1_512", "AVX512_CORE_BF16", ("avx512_fp16",)),
    ("AVX10_1_512_AMX", "AVX10_1_512", ("amx_tile", "amx_int8", "amx_bf16")),
    ("AVX10_1_512_AMX_FP16", "AVX10_1_512_AMX", ("amx_fp16",)),
)


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is not)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def onednn_levels(flags: frozenset[str] | None = None) -> list[str]:
    """The ``ONEDNN_MAX_CPU_ISA`` levels this CPU offers, in oneDNN's order; the last is
    the one oneDNN takes uncapped. A level the CPU lacks is left out: oneDNN would run
    the highest level below it that the CPU has, a path already in the list."""
    flags = cpu_flags() if flags is None else flags
    offered: list[str] = []
    for level, extends, needs in ONEDNN_LEVELS:
        if (extends is None or extends in offered) and all(f in flags for f in needs):
            offered.append(level)
    return offered


def aten_capabilities() -> list[str]:
    """The ``ATEN_CPU_CAPABILITY`` values this CPU supports, lowest first."""
    import torch

    caps = ["default"]
    if torch.cpu._is_avx2_supported():
        caps.append("avx2")
    if torch.cpu._is_avx512_supported():
        caps.append("avx512")
    return caps


def aten_for(level: str) -> str:
    """The ATen capability a CPU whose best oneDNN level is ``level`` gives ATen: ATen's
    avx2 needs AVX2 and FMA, its avx512 AVX-512 F/BW/VL/DQ (oneDNN's AVX512_CORE)."""
    if level.startswith(("AVX512", "AVX10")):
        return "avx512"
    if level.startswith("AVX2"):
        return "avx2"
    return "default"


def path_env(aten: str | None, onednn: str | None) -> dict[str, str]:
    """This process's environment with ATen's capability and oneDNN's cap set (``None``:
    the library's own choice on this CPU, the variable removed)."""
    env = dict(os.environ)
    for name, value in (("ATEN_CPU_CAPABILITY", aten), ("ONEDNN_MAX_CPU_ISA", onednn)):
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env

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
    "adaptive_eager/test_ae_foreach_ema.py", "adaptive_eager/test_ae_divergence.py",
    # and the other files that compare with eager bit for bit (session 10: each passed at
    # all 8 pairs of an Intel Xeon with AVX-512 FP16, tools/cpu_paths.py --paths cpus)
    "adaptive_eager/test_ae_*_bits*.py", "adaptive_eager/test_ae_strided_layouts.py",
    "adaptive_eager/test_ae_inplace_layouts.py",
    "adaptive_eager/test_ae_foreach_optimizers.py", "adaptive_eager/test_ae_out_calls.py",
    "adaptive_eager/test_ae_dynamic_shapes.py", "adaptive_eager/test_ae_complex.py",
    "adaptive_eager/test_ae_liveness.py", "compiler/test_bf16_ml_dtypes.py",
    "compiler/interpreter/test_interpreter_codegen.py",
    "compiler/interpreter/test_interpreter_element_index.py",
    "compiler/interpreter/test_interpreter_specialize.py",
    "compiler/test_cpu_dependent_refused.py", "dynamo/test_dynamo_addc.py",
    "dynamo/test_restrided_in_place.py")
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


# The test functions (every parameter of each) that ran a oneDNN primitive in a run of
# BIT_FILES with ONEDNN_VERBOSE=1 at this CPU's own path (an Intel Xeon with AVX-512
# FP16; ``python tools/cpu_paths.py --list-onednn`` lists them again): float32
# convolutions and their gradients, half-precision products and convolutions, the LSTM
# layer, and ``gelu`` (ATen's CPU kernel runs oneDNN's eltwise). Left out: two tests the
# listing also names only because they compiled their process's first graph, whose
# cache key holds eager's answers at special values (``host_numerics.fingerprint``:
# ``gelu`` at +-inf among them; any first compile here asks them too). With ATen's capability held, a test no oneDNN
# primitive runs in gives the same bits at every oneDNN level, so the reruns at oneDNN's
# levels run these alone.
ONEDNN_TESTS = (
    "compiler/test_exact_batch_norm.py::test_cnn_training_step_is_eagers_bits",
    "compiler/test_exact_conv_grad.py::test_a_users_own_bias_add_keeps_eagers_two_roundings",
    "compiler/test_exact_conv_grad.py::"
    "test_channels_last_forward_is_eagers_bits_and_its_backward_refused",
    "compiler/test_exact_conv_grad.py::test_convolution_training_step_is_eagers_bit_for_bit",
    "compiler/test_exact_conv_grad.py::test_with_bias_is_eagers_bit_for_bit",
    "compiler/test_exact_conv_transpose.py::test_conv_transpose_is_eagers_bit_for_bit",
    "compiler/test_exact_conv_transpose.py::"
    "test_convolution_input_gradient_is_eagers_bit_for_bit",
    "compiler/test_exact_eager_kernels.py::test_every_op_compiles_to_eagers_bits",
    "compiler/test_exact_eager_kernels.py::test_training_step_gradients_are_eagers_bits",
    "compiler/test_exact_linear.py::test_linear_forward_and_gradients_are_eagers_bits",
    "compiler/test_exact_linear.py::test_training_step_gradients_are_eagers_bits",
    "compiler/test_exact_replay_sweep8.py::"
    "test_conv_weight_gradient_of_a_constant_gradient_is_eagers",
    "compiler/test_exact_replay_sweep8.py::test_replayed_training_steps_are_eagers",
    "compiler/test_exact_sweep8.py::test_linear_of_every_input_rank_is_eagers",
    "compiler/test_exact_sweep8.py::test_linear_whose_product_is_also_used_alone",
    "compiler/test_half_conv_refused.py::test_adaptive_eager_runs_half_conv_between_regions",
    "compiler/test_half_conv_refused.py::test_float32_conv_still_compiles",
    "compiler/test_half_conv_refused.py::"
    "test_half_conv_is_refused_and_torch_compile_gives_eagers_bits",
    "compiler/test_half_conv_refused.py::test_half_conv_training_gradients_equal_eagers",
    "compiler/test_special_values_more.py::test_float32_gelu_on_finite_values_matches_eager",
    "compiler/test_special_values_more.py::test_gelu_at_infinities_nan_and_zeros_matches_eager",
    "compiler/test_special_values_more.py::"
    "test_half_activations_are_computed_in_float32_as_eager",
    "device/test_lstm_cpu_bits.py::test_adaptive_eager_lstm_training_gives_cpu_bits",
    "device/test_lstm_cpu_bits.py::test_compiled_lstm_gives_eagers_bits_or_runs_eagerly",
    "device/test_lstm_cpu_bits.py::test_lstm_bits_and_path_equal_cpu",
    "device/test_lstm_cpu_bits.py::test_to_neuron_after_a_host_forward_whose_output_lives",
)


def onednn_tests() -> list[str]:
    """``ONEDNN_TESTS`` as pytest node ids from the repository's root."""
    return [f"tests/{test}" for test in ONEDNN_TESTS]


# --- a pytest plugin (``-p tests.cpu_paths``, with ONEDNN_VERBOSE=1 set) -----------------
# oneDNN prints a line per primitive it executes to the process's stdout, which pytest
# captures per test; the tests whose capture holds one are appended to the file
# ``CPU_PATHS_ONEDNN_OUT`` names, with the primitives' kinds and kernels.

def pytest_runtest_logreport(report) -> None:  # type: ignore[no-untyped-def]
    out = os.environ.get("CPU_PATHS_ONEDNN_OUT")
    if not out:
        return
    kernels = set()
    for line in (report.capstdout or "").splitlines():
        if line.startswith("onednn_verbose") and ",primitive,exec," in line:
            fields = line.split(",")
            kernels.add(f"{fields[5]}:{fields[6]}")  # kind, implementation (ISA in it)
    if kernels:
        with open(out, "a") as f:
            f.write(f"{report.nodeid}\t{' '.join(sorted(kernels))}\n")

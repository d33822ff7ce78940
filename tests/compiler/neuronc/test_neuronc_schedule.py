"""Engines, tiles, the schedule and its cost: roofline, dependencies, overlap, determinism."""

from __future__ import annotations

import json

from neuronc_programs import Builder, mlp

from torchneuron.compiler.neuronc import compile_module
from torchneuron.compiler.stablehlo import Module
from torchneuron.hardware import get_profile


def big_matmul(n: int = 4096, dtype: str = "bf16") -> Module:
    b = Builder()
    return b.build(b.dot(b.arg((n, n), dtype), b.arg((n, n), dtype)))


def test_4096_bf16_matmul_near_tensor_roofline(trn2):
    program = compile_module(big_matmul(), trn2)
    assert program.cost is not None
    roofline_ns = 2 * 4096**3 / trn2.bf16_flops * 1e9
    assert roofline_ns <= program.cost.total_ns <= 1.5 * roofline_ns
    (k,) = program.kernels
    assert k.engines == ["tensor"] and k.cost["bound"] == "tensor"
    # 32 M-tiles x 32 K-tiles x 8 N-banks of 512 columns
    assert k.tiles[0]["matmul_instructions"] == 32 * 32 * 8
    assert k.tiles[0]["psum_banks"] == trn2.psum_banks
    # 2 x 32 MiB operands do not fit 28 MiB of SBUF: the rhs is panelled, lhs re-read
    assert k.sbuf_bytes <= trn2.sbuf_bytes and k.spill_bytes > 0
    assert k.psum_bytes <= trn2.psum_bytes


def test_fp32_matmul_is_slower_than_bf16(trn2):
    bf16 = compile_module(big_matmul(1024, "bf16"), trn2).cost
    f32 = compile_module(big_matmul(1024, "f32"), trn2).cost
    assert bf16 is not None and f32 is not None
    assert f32.total_ns > 3 * bf16.total_ns


def test_engine_assignment(builder, trn2):
    b = builder()
    x = b.arg((256, 256))
    idx = b.arg((8, 1), "i64")
    t = b.op("transpose", [x], (256, 256), permutation=[1, 0])
    cat = b.op("concatenate", [x, t], (512, 256), dimension=0)
    r = b.op("reshape", [b.op("logistic", [cat])], (256, 512))
    g = b.op("iota", [], (256,), "i32", iota_dimension=0)
    program = compile_module(b.build(r, g, idx), trn2, {"fuse": False})
    engines = {program.function.body[k.op_indices[0]].name: k.engines[0] for k in program.kernels}
    assert engines == {
        "stablehlo.transpose": "dma",
        "stablehlo.concatenate": "dma",
        "stablehlo.logistic": "scalar",
        "stablehlo.reshape": "none",
        "stablehlo.iota": "gpsimd",
    }
    fused = compile_module(mlp(), trn2).kernels[0]
    assert fused.engines == ["tensor", "vector", "vector", "scalar"]


def test_schedule_respects_dependencies(trn2):
    for module in (mlp(), big_matmul(512)):
        program = compile_module(module, trn2, {"fuse": False})
        producer = {v: k for k in program.kernels for v in k.outputs}
        for k in program.kernels:
            assert k.end_ns >= k.start_ns
            for v in k.inputs:
                if v in producer:
                    assert k.start_ns >= producer[v].end_ns, (k.name, producer[v].name)
        assert program.cost is not None
        assert program.cost.total_ns == max(k.end_ns for k in program.kernels)


def test_independent_kernels_overlap_on_different_engines(builder, trn2):
    b = builder()
    x, w, y = b.arg((1024, 1024), "bf16"), b.arg((1024, 1024), "bf16"), b.arg((128, 4096))
    mm = b.dot(x, w)
    act = b.op("exponential", [y])
    program = compile_module(b.build(mm, act), trn2)
    assert len(program.kernels) == 2
    a, c = program.kernels
    assert program.cost is not None
    standalone = sum(k.cost["unscheduled_total_ns"] for k in program.kernels)
    assert program.cost.total_ns < standalone
    assert max(a.start_ns, c.start_ns) < min(a.end_ns, c.end_ns)  # they run at the same time


def test_prefetch_overlaps_next_kernels_inputs(builder, trn2):
    # the add needs the sort's output and a big argument: y streams in during the sort
    b = builder()
    x, y = b.arg((512, 2048)), b.arg((512, 2048))
    s = b.op("sort", [b.op("exponential", [x])], dimension=1, is_stable=True)
    program = compile_module(b.build(b.op("add", [s, y])), trn2)
    last = program.kernels[-1]
    assert last.cost["prefetch_bytes"] == 512 * 2048 * 4
    assert last.cost["total_ns"] < last.cost["unscheduled_total_ns"]
    assert program.cost is not None
    assert program.cost.engine_busy_ns["dma"] >= sum(
        k.cost["engine_ns"]["dma"] for k in program.kernels
    )


def test_compile_is_deterministic():
    profile = get_profile("trn2")
    first = json.dumps(compile_module(mlp(), profile).to_dict(), sort_keys=True)
    second = json.dumps(compile_module(mlp(), profile).to_dict(), sort_keys=True)
    assert first == second


def test_trn3_profile_changes_cost():
    t2 = compile_module(mlp(), get_profile("trn2")).cost
    t3 = compile_module(mlp(), get_profile("trn3")).cost
    assert t2 is not None and t3 is not None
    assert t3.total_ns <= t2.total_ns

"""Fusion: fewer kernels and less HBM traffic than op-by-op, legal kernel boundaries."""

from __future__ import annotations

from neuronc_programs import mlp

from torchneuron.compiler.neuronc import compile_module


def test_mlp_fuses_into_fewer_kernels_with_less_hbm(trn2):
    program = compile_module(mlp(), trn2)
    cost = program.cost
    assert cost is not None
    assert cost.num_ops == 5
    assert cost.num_kernels < cost.num_ops
    assert [k.name for k in program.kernels] == ["fused_dot_general_add_logistic", "dot_general"]
    fused_hbm = cost.hbm_read_bytes + cost.hbm_write_bytes
    assert fused_hbm < cost.eager_hbm_read_bytes + cost.eager_hbm_write_bytes
    assert cost.launches_saved == cost.eager_launches - 2 and cost.hbm_bytes_removed > 0
    # the hidden activation (64x512 f32) never leaves SBUF: only x, w1, b1 in, a out
    first = program.kernels[0]
    assert first.work is not None
    assert first.work.hbm_read_bytes == (64 * 256 + 256 * 512 + 512) * 4
    assert first.work.hbm_write_bytes == 64 * 512 * 4
    assert cost.total_ns < cost.eager_ns


def test_fusion_disabled_gives_one_kernel_per_op(trn2):
    program = compile_module(mlp(), trn2, {"fuse": False})
    assert program.cost is not None
    assert program.cost.num_kernels == program.cost.num_ops == len(program.kernels) == 5
    assert all(len(k.op_indices) == 1 for k in program.kernels)
    fused = compile_module(mlp(), trn2).cost
    assert fused is not None
    assert fused.hbm_read_bytes + fused.hbm_write_bytes < (
        program.cost.hbm_read_bytes + program.cost.hbm_write_bytes
    )
    assert fused.total_ns < program.cost.total_ns


def test_reduction_fuses_with_prologue_and_sort_stays_alone(builder, trn2):
    b = builder()
    x = b.arg((128, 1024))
    sq = b.op("multiply", [x, x])
    total = b.reduce_sum(b.op("exponential", [sq]), [1])
    ordered = b.op("sort", [x], dimension=1, is_stable=True)
    program = compile_module(b.build(total, b.op("negate", [ordered])), trn2)
    names = [k.name for k in program.kernels]
    assert "fused_multiply_exponential_reduce" in names
    assert "sort" in names  # isolated: gather/scatter/sort/while never fuse
    sort_kernel = program.kernels[names.index("sort")]
    assert len(sort_kernel.op_indices) == 1 and sort_kernel.engines == ["gpsimd"]


def test_no_cycle_through_an_isolated_kernel(builder, trn2):
    # a -> sort -> c and a -> c: putting c in a's kernel would make a cycle a <-> sort
    b = builder()
    x = b.arg((64, 64))
    a = b.op("exponential", [x])
    s = b.op("sort", [a], dimension=1, is_stable=True)
    c = b.op("add", [a, s])
    program = compile_module(b.build(c), trn2)
    kernel_of = {i: n for n, k in enumerate(program.kernels) for i in k.op_indices}
    body = program.function.body
    index = {r: i for i, op in enumerate(body) for r in op.results}
    for n, k in enumerate(program.kernels):
        for v in k.inputs:
            if v in index and index[v] in kernel_of:
                assert kernel_of[index[v]] < n, "a kernel reads a value of a later kernel"
    assert len(program.kernels) == 3


def test_value_used_outside_its_kernel_is_written_once(builder, trn2):
    b = builder()
    x = b.arg((256, 256))
    e = b.op("exponential", [x])
    program = compile_module(b.build(b.op("add", [e, x]), e), trn2)
    assert len(program.kernels) == 1
    k = program.kernels[0]
    assert sorted(k.outputs) == sorted([e, "1"])  # e is a program output too
    assert k.work is not None and k.work.hbm_write_bytes == 2 * 256 * 256 * 4

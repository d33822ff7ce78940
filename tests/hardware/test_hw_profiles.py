"""Profiles carry the public figures; derived per-core figures and overrides behave."""

from __future__ import annotations

import dataclasses

import pytest

from torchneuron.hardware import ASSUMED_FIELDS, PROFILES, HardwareProfile, get_profile


def test_trn2_public_figures() -> None:
    p = get_profile("trn2")
    assert (p.pe_rows, p.pe_cols, p.tensor_clock_hz) == (128, 128, 2_400_000_000)
    # the derived array peak matches the published 79 BF16 TFLOPS per core within 1%
    assert abs(p.bf16_flops / 1e12 - p.published_bf16_tflops) / p.published_bf16_tflops < 0.01
    assert p.hbm_bytes_per_core == 12 * 1024**3  # 96 GiB / 8 physical cores
    assert p.hbm_bw_per_core == 2_900_000_000_000 // 8
    assert p.psum_bytes == p.sbuf_partitions * p.psum_banks * p.psum_bank_bytes
    assert p.psum_bank_bytes // 4 == p.psum_bank_fp32_cols == 512
    assert p.matmul_flops("f32") * p.fp32_slowdown == p.matmul_flops("bf16")
    assert p.matmul_flops("f8E4M3FN") == 2 * p.matmul_flops("bf16")


def test_trn3_differs_where_public_figures_differ() -> None:
    t2, t3 = get_profile("trn2"), get_profile("trn3")
    assert t3.hbm_bytes_per_core == 18 * 1024**3
    assert t3.hbm_bw_per_core > t2.hbm_bw_per_core
    assert t3.sbuf_bytes > t2.sbuf_bytes
    assert t3.vector_clock_hz == 1_200_000_000


def test_assumed_fields_are_fields_and_reportable() -> None:
    names = {f.name for f in dataclasses.fields(HardwareProfile)}
    assert set(ASSUMED_FIELDS) <= names
    assert "host_dispatch_ns" in PROFILES["trn2"].assumptions()


def test_override_with_replace_and_frozen() -> None:
    p = dataclasses.replace(get_profile("trn2"), host_dispatch_ns=1)
    assert p.host_dispatch_ns == 1 and get_profile("trn2").host_dispatch_ns == 15_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.host_dispatch_ns = 2  # type: ignore[misc]


def test_unknown_profile_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="trn2, trn3"):
        get_profile("trn9")


def test_describe_assumptions_names_every_assumed_field() -> None:
    text = get_profile("trn2").describe_assumptions()
    assert all(f"{name} = " in text for name in ASSUMED_FIELDS)
    assert "eager_compile_ns = 150000000 (assumed)" in text

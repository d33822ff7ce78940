"""The collectives' cost model (``hardware.collectives``) and the nccom-test style table."""

from __future__ import annotations

import pytest

from torchneuron.distributed.collectives import main, parse_size, sizes_between, table
from torchneuron.hardware.collectives import (
    choose_algorithm,
    collective_cost,
    get_topology,
)

TRN2 = get_topology("trn2")


def test_64mb_all_reduce_on_8_ranks_follows_the_ring_formula() -> None:
    s, p = 64 * 2**20, 8
    c = collective_cost("all_reduce", s, list(range(p)), TRN2)
    assert c.algorithm == "ring" and c.level == "chip"
    formula_ns = 2 * (p - 1) / p * s / c.bandwidth * 1e9 + 2 * (p - 1) * c.alpha_ns
    assert abs(c.ns - formula_ns) / formula_ns < 0.10


def test_algorithm_by_size() -> None:
    assert choose_algorithm(512 * 1024, TRN2) == "mesh"
    assert choose_algorithm(8 * 2**20, TRN2) == "rdh"
    assert choose_algorithm(57_000_000, TRN2) == "ring"


def test_levels_and_latency() -> None:
    chip = collective_cost("all_reduce", 1024, list(range(8)), TRN2)
    inst = collective_cost("all_reduce", 1024, list(range(16)), TRN2)
    ultra = collective_cost("all_reduce", 1024, [0, 128], TRN2)  # two instances of one
    efa = collective_cost("all_reduce", 1024, [0, 512], TRN2)  # two UltraServers
    assert (chip.level, inst.level, ultra.level, efa.level) == (
        "chip", "instance", "ultraserver", "efa")
    assert chip.ns < inst.ns and ultra.ns < efa.ns
    assert collective_cost("all_reduce", 1024, [3], TRN2).ns == 0


def test_an_ultraservers_chips_share_its_256_gbs_per_chip() -> None:
    """Two whole instances: within one UltraServer each chip's 256 GB/s across it is
    shared by its 8 ranks (32 GB/s each); in two UltraServers EFA's 400 GB/s per
    instance is shared by the instance's 128 ranks, far slower."""
    group = list(range(256))
    c = collective_cost("all_gather", 2**30, group, TRN2)
    assert c.level == "ultraserver" and c.bandwidth == TRN2.ultraserver_bw_per_chip / 8
    far = collective_cost("all_gather", 2**30, [*range(128), *range(512, 640)], TRN2)
    assert far.level == "efa" and far.bandwidth == TRN2.efa_bw_per_instance / 128
    assert c.ns < far.ns


def test_bus_bandwidth_approaches_the_link_bandwidth() -> None:
    big = collective_cost("all_gather", 2**30, list(range(8)), TRN2)
    assert 0.95 * TRN2.chip_bw < big.busbw <= TRN2.chip_bw


def test_sizes_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_size("64MB") == 64 * 2**20
    assert sizes_between("1KB:8KB") == [1024, 2048, 4096, 8192]
    with pytest.raises(ValueError, match="cannot read the size"):
        parse_size("lots")
    text, rows = table("all_reduce", 8, sizes_between("1KB:1GB"), "trn2")
    assert [r.algorithm for r in rows][:1] == ["mesh"] and rows[-1].algorithm == "ring"
    assert main(["--nproc", "8", "--op", "all_reduce", "--sizes", "1MB:4MB",
                 "--assumptions"]) == 0
    out = capsys.readouterr().out
    assert "busbw(GB/s)" in out and "chip_bw = 368000000000 (assumed)" in out

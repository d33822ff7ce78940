"""``replay._accept`` (the flat guard's lifted floats, taken as values) decides and stores
exactly what ``lift.accept`` does on their reprs, the general path's form."""

from __future__ import annotations

import math
import struct

import torch

from torchneuron.adaptive_eager import lift
from torchneuron.adaptive_eager.replay import _accept

_VALUES = [0.0, -0.0, 1.5, -2.25e-3, 1e-45, 3.4028234663852886e38, 3.5e38, -3.5e38, 1e300,
           math.inf, -math.inf, math.nan, -math.nan,
           struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]]


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


def test_accept_matches_lift_accept_on_reprs() -> None:
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for v in _VALUES:
            want: dict[int, float] = {}
            got: dict[int, float] = {}
            ok_want = lift.accept([(0, repr(v))], want, [dtype])
            ok_got = _accept([(0, v)], got, [dtype])
            assert ok_got == ok_want, (dtype, v)
            if ok_want:
                assert _bits(got[0]) == _bits(want[0]), (dtype, v)
            # the general walk's reprs are still read as lift.accept reads them
            again: dict[int, float] = {}
            assert _accept([(0, repr(v))], again, [dtype]) == ok_want
            if ok_want:
                assert _bits(again[0]) == _bits(want[0])

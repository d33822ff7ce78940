"""Fixtures of the neuronc tests: the program builder and the trn2 profile."""

from __future__ import annotations

import pytest
from neuronc_programs import Builder

from torchneuron.hardware import HardwareProfile, get_profile


@pytest.fixture
def builder() -> type[Builder]:
    return Builder


@pytest.fixture
def trn2() -> HardwareProfile:
    return get_profile("trn2")

"""Every torch.compile test here runs with verification on (TORCHNEURON_VERIFY=1).

Each newly compiled graph's first run is also run eagerly and compared
(torchneuron.compiler.verify); a mismatch is counted as a failure
(``verify:verify-mismatch``), which the parity tests' ``failures == 0`` checks catch.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from torchneuron.hardware.settings import override


@pytest.fixture(autouse=True)
def _verify_compiled_graphs() -> Iterator[None]:
    with override(verify=True):
        yield

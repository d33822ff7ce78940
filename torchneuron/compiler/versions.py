"""The two versions an executable carries: its format's and the compiler's.

Apart from ``executable`` because the cache keys (``keys``) hash them too, and
``executable`` checks an entry against its key: with the versions here, neither module
imports the other's dependents back.
"""

from __future__ import annotations

from torchneuron._version import __version__

__all__ = ["FORMAT_VERSION", "COMPILER_VERSION"]

FORMAT_VERSION = 2
# The compiler is versioned with the package: one constant, typed once in _version.py.
COMPILER_VERSION = __version__

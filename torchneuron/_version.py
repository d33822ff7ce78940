"""The package version, written once.

``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``), ``torchneuron.__version__``
re-exports it, and the compiler's version (part of every cache key) is this string plus a
digest of the package's source (``compiler/versions.py``), so a release bump, or any edit
to the code, makes every cached executable of before unreachable.
"""

__version__ = "0.1.9"

"""The package version, written once.

``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``), ``torchneuron.__version__``
re-exports it, and the compiler's version (part of every cache key) is this string, so a
release bump makes every cached executable of the previous release unreachable.
"""

__version__ = "0.1.9"

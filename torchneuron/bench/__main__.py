"""``python -m torchneuron.bench``: the same as ``torchneuron-bench``."""

from torchneuron.bench.cli import main

raise SystemExit(main())

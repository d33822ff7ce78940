"""``python -m torchneuron.cache``: the same as the ``torchneuron-cache`` command."""

import sys

from torchneuron.cache.cli import main

sys.exit(main())

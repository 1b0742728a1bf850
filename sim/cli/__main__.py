"""``python -m sim.cli``: the same as the ``simrun`` console script."""

import sys

from sim.cli import main

sys.exit(main())

"""`python -m pykubelet ...` is the same as the `pykubelet` script (the supervisor uses it)."""

import sys

from pykubelet.cli import main

sys.exit(main())

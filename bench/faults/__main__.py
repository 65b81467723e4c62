"""``python -m bench.faults``: the fault suite (bench/faults/run.py)."""

import sys

from bench.faults.run import main

sys.exit(main())

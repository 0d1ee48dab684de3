"""``python -m hotline.bench``: see `hotline.bench.benchmarks`."""
import sys

from .benchmarks import main

sys.exit(main())

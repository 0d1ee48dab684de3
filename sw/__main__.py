"""``python -m hotline``: the `hotline` command (so ``torchrun ... -m hotline train ...`` works)."""
import sys

from hotline.cli import main

sys.exit(main())

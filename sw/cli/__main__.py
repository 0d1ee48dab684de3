"""``python -m hotline.cli``: the `hotline` command."""
import sys

from .cli import main

sys.exit(main())

"""The `hotline` command (`hotline.cli.cli`; the console script is ``hotline.cli:main``) and
the operations behind it (`hotline.cli.commands`)."""
from .cli import build_parser, main

__all__ = ["main", "build_parser"]

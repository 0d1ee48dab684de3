"""User-facing errors: one line that names the file, line or field that is wrong."""


class HotlineError(Exception):
    """Bad input or an impossible request. The CLI prints it as one line and exits 2."""

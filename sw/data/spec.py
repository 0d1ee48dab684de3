"""DATA as the commands take it: a data file (any format `hotline.data.readers` reads) or
``synth:LIKE:SAMPLES[:SEED]``, the built-in calibrated generator."""
from hotline.contract.errors import HotlineError

from .generator import synth
from .readers import Dataset, load_dataset

__all__ = ["SYNTH_PREFIX", "open_data"]

SYNTH_PREFIX = "synth:"


def open_data(spec, fmt=None, max_ind_range=None, limit=None) -> Dataset:
    """A `Dataset` from a file path or ``synth:LIKE:SAMPLES[:SEED]`` (the built-in generator)."""
    spec = str(spec)
    if spec.startswith(SYNTH_PREFIX):
        parts = spec[len(SYNTH_PREFIX):].split(":")
        try:
            like, samples, seed = parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise HotlineError(f"{spec}: expected synth:LIKE:SAMPLES[:SEED], "
                               f"e.g. synth:criteo-kaggle:100000") from None
        ds = synth(like, samples, seed)
        return ds if limit is None else ds.head(limit)
    return load_dataset(spec, fmt, max_ind_range, limit)

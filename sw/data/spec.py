"""DATA as the commands take it: a data file (any format `hotline.data.readers` reads), a
shard directory or its ``index.json`` (`hotline.data.shards`), or
``synth:LIKE:SAMPLES[:SEED][:drift=RATE]``, the built-in calibrated generator."""
from hotline.contract.errors import HotlineError

from .generator import DRIFT_CRITEO_KAGGLE, DRIFT_HELP, LIKE, check_drift, synth
from .readers import Dataset, iter_chunks, load_dataset
from .shards import ShardedDataset, is_shard_index

__all__ = ["SYNTH_PREFIX", "open_chunks", "open_data", "parse_drift", "parse_synth"]

SYNTH_PREFIX = "synth:"
SYNTH_FORM = "synth:LIKE:SAMPLES[:SEED][:drift=RATE]"


def parse_drift(text) -> float:
    """A drift RATE: a number in [0, 1) (`DRIFT_HELP`) or ``real``, the rate measured on the
    Criteo Kaggle log (`DRIFT_CRITEO_KAGGLE`); a one-line HotlineError otherwise."""
    text = str(text).strip()
    if text == "real":
        return DRIFT_CRITEO_KAGGLE
    try:
        rate = float(text)
    except ValueError:
        raise HotlineError(f"drift={text} is not a number (give a number in [0, 1), "
                           f"{DRIFT_HELP}, or 'real')") from None
    if not 0.0 <= rate < 1.0:
        what = "negative" if rate < 0 else "not below 1" if rate >= 1 else "not a number"
        raise HotlineError(f"drift={text} is {what} (give a number in [0, 1), {DRIFT_HELP}, "
                           f"or 'real')")
    return check_drift(rate)


def parse_synth(spec) -> tuple:
    """``synth:LIKE:SAMPLES[:SEED][:drift=RATE]`` -> (like, samples, seed, drift); a one-line
    HotlineError naming the faulty part otherwise."""
    spec = str(spec)
    parts = spec[len(SYNTH_PREFIX):].split(":")
    options = [p for p in parts if "=" in p]
    plain = [p for p in parts if "=" not in p]
    if options and parts[-len(options):] != options:
        raise HotlineError(f"{spec}: options (drift=RATE) go after LIKE:SAMPLES[:SEED] "
                           f"({SYNTH_FORM})")
    try:
        if not 2 <= len(plain) <= 3:
            raise ValueError
        like, samples, seed = plain[0], int(plain[1]), int(plain[2]) if len(plain) > 2 else 0
    except ValueError:
        raise HotlineError(f"{spec}: expected {SYNTH_FORM}, e.g. synth:criteo-kaggle:100000 "
                           f"or synth:criteo-kaggle:500000:0:drift=0.1") from None
    if like not in LIKE:
        raise HotlineError(f"{spec}: LIKE {like!r} is not known (choose from "
                           f"{', '.join(LIKE)}; {SYNTH_FORM})")
    if samples <= 0:
        raise HotlineError(f"{spec}: SAMPLES must be positive, not {samples} ({SYNTH_FORM})")
    if seed < 0:
        raise HotlineError(f"{spec}: SEED must be 0 or more, not {seed} ({SYNTH_FORM})")
    drift = None
    for opt in options:
        name, _, value = opt.partition("=")
        if name != "drift":
            raise HotlineError(f"{spec}: unknown option {name!r} (the only one is drift=RATE)")
        if drift is not None:
            raise HotlineError(f"{spec}: drift is given twice")
        try:
            drift = parse_drift(value)
        except HotlineError as e:
            raise HotlineError(f"{spec}: {e}") from None
    return like, samples, seed, drift or 0.0


def open_data(spec, fmt=None, max_ind_range=None, limit=None) -> Dataset | ShardedDataset:
    """A `Dataset` from a file path or ``synth:LIKE:SAMPLES[:SEED][:drift=RATE]`` (the
    built-in generator); a `ShardedDataset` (read shard by shard) from a shard directory or
    its index. ``max_ind_range`` folds every table to at most M rows whatever the input
    (`readers.iter_chunks`; row ids modulo M, `Dataset.fold`, for the generator and shards)."""
    spec = str(spec)
    if spec.startswith(SYNTH_PREFIX):
        ds = synth(*parse_synth(spec)).fold(max_ind_range)
        return ds if limit is None else ds.head(limit)
    if is_shard_index(spec):
        if fmt is not None:
            raise HotlineError(f"{spec}: a shard index; --format does not apply")
        ds = ShardedDataset(spec, max_ind_range=max_ind_range)
        return ds if limit is None else ds.head(limit)
    return load_dataset(spec, fmt, max_ind_range, limit)


def open_chunks(spec, fmt=None, max_ind_range=None):
    """DATA as `Dataset` chunks in order (`readers.iter_chunks`; a shard stream shard by
    shard; the generator in one chunk), folded by ``max_ind_range`` as `open_data` folds
    them, for converting in bounded memory."""
    spec = str(spec)
    if spec.startswith(SYNTH_PREFIX) or is_shard_index(spec):
        ds = open_data(spec, fmt, max_ind_range)
        return ds.iter_shards() if isinstance(ds, ShardedDataset) else iter([ds])
    return iter_chunks(spec, fmt, max_ind_range)

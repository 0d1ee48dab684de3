"""``hotline`` mode's store: `hotline.nn`'s `HotlineStore` sized and planned for a run
(`hotline_store`). The hot rows live in a device-resident hot table at their CAM slots; the
accelerator (`hotline.open(url)`) fragments each mini-batch and gathers its unique cold rows
into a staging bank; the updated cold rows go back into staging and the device scatters them.
The next batch is pushed (fragmented and gathered) before the current one trains. The store
owns every rule of that pipeline (stale rows, overflows, hot-set changes with nothing in
flight, data parallel), so the mode trains exactly as ``baseline`` does.

The host tables are the store's `HostStore` (baseline's storage); evaluation and checkpoints
read the rows through the store (hot rows from the hot table), so every mode ends with the
same tables.
"""
import numpy as np

from hotline.contract.config import AcceleratorConfig, max_batch_lookups
from hotline.contract.errors import HotlineError
from hotline.host.device import Device
from hotline.model.planner import exact_hot_set, profile_samples
from hotline.nn.hot_set import HotSetSchedule
from hotline.nn.hotline_store import HotlineStore

from .placement import host_store
from .rows import check_fits


def hotline_store(run, hot_keys=None, schedule=None) -> HotlineStore:
    """The run's `HotlineStore`: the hot set (``hot_keys``, rank order, from a checkpoint; or
    the exact top-K of the profiling window; or none yet with ``--hot-set learn``), the
    schedule of learned loads and refreshes (``schedule``, from a checkpoint, or new), the
    accelerator sized for the run's batches, the tables DLRM-initialised in host memory."""
    d, cfg, lay = run.data, run.cfg, run.lay
    budget = run.hot_budget
    target = budget["rows"]
    learns = cfg.hot_set == "learn" or cfg.refresh != "off"
    window = learn_window(run) if learns else 0
    profiled = profile_samples(d.n_train, cfg.profile_fraction)
    if schedule is None:
        schedule = HotSetSchedule(window or 1, cfg.refresh, learn_first=cfg.hot_set == "learn",
                                  profiled=0 if cfg.hot_set == "learn"
                                  else profiled // cfg.batch_size)
    if hot_keys is None and cfg.hot_set == "learn":
        hot_keys = np.zeros(0, np.uint32)  # the first window trains with every row cold
    elif hot_keys is None:
        run.phase("planning the hot set")
        hot = exact_hot_set(d.keys[:d.offsets[profiled]], target)
        if hot.clamped:
            run.notes.append(f"the hot set ({budget['source']}: {target:,} rows) exceeds the "
                             f"{hot.distinct:,} distinct keys in the profiling window; using "
                             f"{hot.size:,}")
        hot_keys = hot.keys
    lookups = max_batch_lookups(d.offsets, cfg.batch_size, d.n_train)
    # the learner sized for K: a window cannot show it more distinct keys than lookups
    config = AcceleratorConfig.for_workload(
        max(len(hot_keys), target if learns else 0), cfg.batch_size, lookups,
        learn=learns, distinct_keys=window * lookups if learns else None)
    slots = config.cold_max_keys
    if slots > Device.max_slots:
        raise HotlineError(f"--batch-size {cfg.batch_size}: a batch has up to {slots:,} "
                           f"lookups, more than the {Device.max_slots:,} staging slots of a "
                           f"bank; use a smaller --batch-size")
    if not HotlineStore.trains_in_place(run.dev, run.ranks):   # else all in host memory
        check_fits(f"{run.dev.type} device memory (hot table + staging copies)",
                   (config.hot_slots + 2 * slots) * lay.nbytes, run.device_limit(), d)
    host = host_store(run, HotlineStore.staging_bytes(config, lay, ranks=run.ranks,
                                                    torch_device=run.dev))
    url = device_url(run)
    run.phase(f"opening the device ({url}), loading {len(hot_keys):,} hot keys into the CAM "
              f"and their rows to the torch device")
    try:
        store = HotlineStore(d.table_sizes, lay, device_url=url, torch_device=run.dev,
                             hot_rows=target, hot_keys=hot_keys, hot_set=cfg.hot_set,
                             learn_window=window or None, refresh=cfg.refresh,
                             batch_lookups=lookups, batch_size=cfg.batch_size,
                             ranks=run.ranks, host=host, config=config, schedule=schedule)
    except BaseException:
        host.close()
        raise
    refused = store.placement.failed.size
    if refused:
        run.notes.append(f"the CAM refused {refused} of {len(hot_keys)} hot keys; they are "
                         f"trained as cold rows")
    return store


def device_url(run) -> str:
    """This rank's accelerator: --device-url is one URL for every rank (``{rank}`` and
    ``{local_rank}`` in it are replaced), or a comma-separated list, one per rank."""
    url, r = run.cfg.device_url, run.ranks
    rank, local = (0, 0) if r is None else (r.rank, r.local_rank)
    urls = url.split(",")
    if len(urls) > 1:
        if len(urls) != run.world:
            raise HotlineError(f"--device-url lists {len(urls)} URLs for {run.world} ranks "
                               f"(give one per rank, or one for all)")
        url = urls[rank]
    return url.replace("{rank}", str(rank)).replace("{local_rank}", str(local))


def learn_window(run) -> int:
    """The learner window in steps: --learn-window samples, or the profiling window, in
    whole batches; at least one."""
    cfg, n_train = run.cfg, run.data.n_train
    samples = cfg.learn_window or profile_samples(n_train, cfg.profile_fraction)
    if samples < cfg.batch_size:
        what = (f"--learn-window {cfg.learn_window}" if cfg.learn_window else
                f"--profile-fraction {cfg.profile_fraction:g} of {n_train:,} train samples")
        raise HotlineError(f"the learner window ({what}: {samples:,} samples) is shorter "
                           f"than one batch (--batch-size {cfg.batch_size})")
    return min(samples, n_train) // cfg.batch_size


def coverage_record(run, load) -> dict:
    """The JSON's ``hot_loads`` entry of a learned set the store loaded (``load``, one of its
    `HotlineStore.loads`): the set's coverage of its learning window beside the exact
    top-K's."""
    start, step = load["window_steps"]
    nb = run.num_batches()
    window = np.concatenate([run.batch_arrays(*run.batch_range(g % nb))[0]
                             for g in range(start, step)])
    store = run.embedding.store
    exact = exact_hot_set(window, store.hot_rows).keys
    learned, best = np.isin(window, store.hot_keys).mean(), np.isin(window, exact).mean()
    return {"step": step, "window_steps": [start, step], "keys": load["keys"],
            "held": load["held"], "learned_coverage": float(learned),
            "exact_coverage": float(best), "coverage_ratio": float(learned / best) if best else 1.0,
            "learner_counted": load["learner_counted"], "learner_dropped": load["learner_dropped"]}

"""hotline.nn's EmbeddingBagCollection under torch.distributed (gloo, 2 real ranks): each rank
trains its half of every batch and the tables end as one process's over the whole batches
(each row one update per step with the gradient summed over the ranks), for the "host"
placement (one shared host memory file, rows updated by their owner), the "device" placement
(a replica per rank) and the "hotline" placement (hot replicas, cold rows written by their
owner through its device; a learned hot set, refreshed, with prefetch). The reference is the
"host" collection in one process; the ranks sum a row's gradient in rank order, one process
in lookup order: 1e-6 of the scale."""
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import TABLE_RTOL
from hotline.contract.errors import HotlineError
from hotline.nn import EmbeddingBagCollection
from hotline.nn.inputs import fbgemm_layout

torchrec = pytest.importorskip("torchrec")
from torchrec import EmbeddingBagConfig  # noqa: E402

SIZES, DIM, BATCH, STEPS = (300, 40, 7), 4, 64, 12


def configs():
    return [EmbeddingBagConfig(name=f"t{t}", embedding_dim=DIM, num_embeddings=n,
                               feature_names=[f"f{t}"]) for t, n in enumerate(SIZES)]


def stream(seed=5):
    """Skewed multi-hot samples (0-3 ids per bag, empty bags included): (lengths, indices)."""
    rng = np.random.default_rng(seed)
    n = BATCH * STEPS
    lengths = rng.integers(0, 4, (n, len(SIZES)))
    feats = np.repeat(np.tile(np.arange(len(SIZES)), n), lengths.ravel())
    ids = (rng.zipf(1.3, len(feats)) - 1) % np.asarray(SIZES)[feats]
    return lengths, ids


def train(ebc, lo, hi, prefetch=False):
    """STEPS batches; this process's samples [lo, hi) of each (a fraction of BATCH). Per step
    the summed loss of those samples, divided by BATCH."""
    lengths, ids = stream()
    start = np.r_[0, np.cumsum(lengths.sum(1))]
    proj = torch.linspace(-1, 1, len(SIZES) * DIM)
    batch = lambda s0, s1: fbgemm_layout(lengths[s0:s1], ids[start[s0]:start[s1]])
    out = []
    for step in range(STEPS):
        s0, s1 = step * BATCH + lo, step * BATCH + hi
        pooled = ebc(*batch(s0, s1))
        if prefetch and step + 1 < STEPS:
            ebc.prefetch(*batch(s0 + BATCH, s1 + BATCH))
        loss = ((pooled @ proj - 0.5) ** 2).sum() / BATCH   # nonlinear in the rows
        loss.backward()
        out.append(float(loss.detach()))
    return out


HOTLINE = dict(hot_rows=60, hot_set="learn", learn_window=3, refresh="every:4",
               batch_lookups=BATCH * len(SIZES) * 3, batch_size=BATCH)


def rank_main(rank, world, placement, optimizer, init, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=init, RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)   # different on each rank: the tables must still be rank 0's
        ebc = EmbeddingBagCollection(configs(), placement=placement, optimizer=optimizer,
                                     lr=0.1, device="cpu",
                                     **(HOTLINE if placement == "hotline" else {}))
        initial = {k: v.clone() for k, v in ebc.state_dict().items()}
        half = BATCH // world
        losses = train(ebc, rank * half, (rank + 1) * half, prefetch=placement == "hotline")
        if placement == "hotline":   # the learned set loaded, then refreshed, alike on both
            loads = ebc.store.counters()["loads"]
            assert [x["step"] for x in loads] == [3, 7, 11], loads
            np.save(f"{out}/hot{rank}.npy", ebc.store.placement.keys)
        np.savez(f"{out}/rank{rank}.npz", losses=losses,
                 **{f"start/{k}": v.numpy() for k, v in initial.items()},
                 **{k: v.numpy() for k, v in ebc.state_dict().items()})
        ebc.close()
    finally:
        dist.destroy_process_group()


def free_port() -> str:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize("placement,optimizer", [("host", "sgd"), ("host", "rowwise_adagrad"),
                                                 ("device", "adam"), ("hotline", "rowwise_adagrad"),
                                                 ("hotline", "adam")])
def test_two_ranks_train_as_one_process(tmp_path, placement, optimizer):
    mp.spawn(rank_main, args=(2, placement, optimizer, free_port(), str(tmp_path)), nprocs=2)
    r0, r1 = (np.load(tmp_path / f"rank{r}.npz") for r in (0, 1))
    start = {k[len("start/"):]: torch.from_numpy(r0[k]) for k in r0.files if k.startswith("start/")}
    # rank 1 began from rank 0's tables, whatever its own seed
    for k in start:
        np.testing.assert_array_equal(r1[f"start/{k}"], r0[f"start/{k}"])
    torch.set_num_threads(1)
    if placement == "hotline":   # both ranks held the same hot set at the end
        np.testing.assert_array_equal(np.load(tmp_path / "hot0.npy"), np.load(tmp_path / "hot1.npy"))
        assert len(np.load(tmp_path / "hot0.npy")) > 0
    one = EmbeddingBagCollection(configs(), placement="host" if placement == "hotline"
                                 else placement, optimizer=optimizer, lr=0.1, device="cpu")
    one.load_state_dict(start)
    ref = train(one, 0, BATCH)
    np.testing.assert_allclose(np.asarray(r0["losses"]) + r1["losses"], ref, rtol=1e-6)
    for k, v in one.state_dict().items():
        scale = max(float(v.abs().max()), 1e-3)
        for r in (r0, r1):   # every rank sees the same tables (shared memory, or replicas)
            # optimizer state holds 1e-6 here too; only the weights need TABLE_RTOL
            rtol = TABLE_RTOL[optimizer] if k.endswith(".weight") else 1e-6
            assert np.abs(r[k] - v.numpy()).max() <= rtol * scale, k
    one.close()


def test_a_hot_set_profiled_per_rank_is_refused(tmp_path):
    """An exact hot set from each rank's own batches would differ between the replicas: a
    one-line error, not a silently wrong run."""
    mp.spawn(refused_main, args=(free_port(), str(tmp_path)), nprocs=2)
    for r in (0, 1):
        assert (tmp_path / f"rank{r}.txt").read_text() == (
            "hot_set 'exact' from profile_batches is per rank; under several ranks give "
            "hot_keys (planned from every rank's lookups) or hot_set 'learn'")


def refused_main(rank, init, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=init)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        EmbeddingBagCollection(configs(), placement="hotline", hot_rows=10, profile_batches=1)
    except HotlineError as e:
        (__import__("pathlib").Path(out) / f"rank{rank}.txt").write_text(str(e))
    finally:
        dist.destroy_process_group()

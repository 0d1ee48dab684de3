"""`make bench`'s ``peer`` section: TorchRec's own DLRM beside `hotline train`.

TorchRec's `torchrec.models.dlrm.DLRM` (``DLRMTrain``: BCE-with-logits loss) with its
`EmbeddingBagCollection` under `DistributedModelParallel` on the CPU, as TorchRec ships it:
world size 1 over a gloo process group, the embeddings sharded by its planner into one fused
FBGEMM TBE with SGD applied in backward (`apply_optimizer_in_backward`), the dense part under
`torch.optim.SGD`. Same data, sizes, batch and learning rate as `make train` (`hotline train`
on the generator folded with --max-ind-range 1000000, B = 1024, dim 16, bottom 512-256-64,
top 512-256, SGD lr 0.1), one torch thread; samples/s over the training steps of one epoch,
interleaved round by round with `hotline train --mode baseline / device-only / hotline`.
"""
import contextlib
import logging
import os
import socket
import time
import warnings

import numpy as np

from hotline.contract.keys import MAX_ROWS
from hotline.data.spec import open_data
from hotline.train import prepare_data, train

from .embedding import fbgemm_layout

MODES = ("baseline", "device-only", "hotline")


@contextlib.contextmanager
def process_group(backend="gloo"):
    """A one-rank process group on a free local port (DMP needs one), destroyed after."""
    import torch.distributed as dist  # lazy: torch takes seconds to import
    if dist.is_initialized():
        yield
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")}
    saved["LOCAL_WORLD_SIZE"] = os.environ.get("LOCAL_WORLD_SIZE")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE="1")
    dist.init_process_group(backend, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _quiet():
    """Python warnings off and the root and torchrec loggers at ERROR (TorchRec's planner and
    DMP warn about their own defaults)."""
    loggers = [logging.getLogger(), logging.getLogger("torchrec")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


class TorchRecDLRM:
    """TorchRec's DLRM under DMP for ``data``'s tables (a `TrainData`), on ``device``."""

    def __init__(self, data, dim=16, bottom=(512, 256, 64), top=(512, 256), lr=0.1,
                 device="cpu", seed=0):
        # lazy: torch and torchrec take seconds to import
        import torch
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
        from torchrec.distributed import DistributedModelParallel
        from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.models.dlrm import DLRM, DLRMTrain
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
        from torchrec.optim.optimizers import in_backward_optimizer_filter
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.features = [f"f{t}" for t in range(data.num_tables)]
        tables = [EmbeddingBagConfig(name=f"t{t}", embedding_dim=dim, num_embeddings=int(n),
                                     feature_names=[self.features[t]])
                  for t, n in enumerate(data.table_sizes)]
        ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
        model = DLRMTrain(DLRM(embedding_bag_collection=ebc,
                               dense_in_features=data.dense.shape[1],
                               dense_arch_layer_sizes=[*bottom, dim],
                               over_arch_layer_sizes=[*top, 1], dense_device=self.device))
        apply_optimizer_in_backward(torch.optim.SGD,
                                    model.model.sparse_arch.parameters(), {"lr": lr})
        # Every table sharded table-wise into the fused TBE (the planner would make the
        # smallest ones data-parallel with a dense kernel and a separate optimizer step).
        constraints = {c.name: ParameterConstraints(sharding_types=["table_wise"],
                                                    compute_kernels=["fused"]) for c in tables}
        with _quiet():   # the planner logs its plan and a page of warnings about itself
            planner = EmbeddingShardingPlanner(
                topology=Topology(world_size=1, compute_device=self.device.type),
                constraints=constraints)
            self.dmp = DistributedModelParallel(model, device=self.device,
                                                plan=planner.collective_plan(model))
        dense = dict(in_backward_optimizer_filter(self.dmp.named_parameters()))
        self.opt = torch.optim.SGD(dense.values(), lr=lr)
        plan = self.dmp.plan.plan.get("model.sparse_arch.embedding_bag_collection", {})
        self.kernels = sorted({str(p.compute_kernel) for p in plan.values()})
        self.data = data

    def batch(self, s0, s1):
        """TorchRec's `Batch` of samples [s0, s1)."""
        # lazy: (see __init__)
        import torch
        from torchrec import KeyedJaggedTensor
        from torchrec.datasets.utils import Batch
        keys, counts = fbgemm_layout(self.data, s0, s1)
        kjt = KeyedJaggedTensor(keys=self.features,
                                values=torch.from_numpy(keys & (MAX_ROWS - 1)),
                                lengths=torch.from_numpy(counts.astype(np.int32)))
        return Batch(dense_features=torch.from_numpy(self.data.dense[s0:s1]),
                     sparse_features=kjt,
                     labels=torch.from_numpy(self.data.label[s0:s1])).to(self.device)

    def train_step(self, s0, s1) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss, _ = self.dmp(self.batch(s0, s1))
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def train_torchrec(data, batch_size=1024, lr=0.1, device="cpu", max_steps=None) -> dict:
    """One epoch of TorchRec's DLRM over ``data``'s training samples: samples/s over the steps
    (the input's conversion to a KeyedJaggedTensor included, as `hotline train`'s steps
    include theirs), mean training logloss, setup seconds."""
    import torch  # lazy: (see process_group)
    t0 = time.perf_counter()
    with process_group("nccl" if device != "cpu" else "gloo"):
        peer = TorchRecDLRM(data, lr=lr, device=device)
        setup = time.perf_counter() - t0
        steps = -(-data.n_train // batch_size)
        steps = steps if max_steps is None else min(steps, max_steps)
        seconds, losses, samples = 0.0, [], 0
        for j in range(steps):
            s0, s1 = j * batch_size, min((j + 1) * batch_size, data.n_train)
            if device != "cpu":
                torch.cuda.synchronize()
            t = time.perf_counter()
            losses.append(peer.train_step(s0, s1) * (s1 - s0))
            if device != "cpu":
                torch.cuda.synchronize()
            seconds += time.perf_counter() - t
            samples += s1 - s0
        kernels = peer.kernels
        del peer
    return {"samples_per_s": samples / seconds, "train_seconds": seconds,
            "train_logloss": sum(losses) / samples, "setup_seconds": setup, "steps": steps,
            "compute_kernels": kernels}


def bench_peer(quick, train_config, rounds=None, threads=1):
    """The section: ``rounds`` interleaved rounds (2; 1 with ``quick``) of TorchRec's DLRM and
    `hotline train` in each mode (``train_config(mode, threads=...)`` gives its `TrainConfig`)
    on `make train`'s data (20,000 samples with ``quick``). (JSON, table rows)."""
    import torch  # lazy: (see process_group)
    samples = 20_000 if quick else 500_000
    rounds = rounds or (1 if quick else 2)
    spec = f"synth:criteo-kaggle:{samples}"
    data = prepare_data(open_data(spec, max_ind_range=1_000_000), 0.1, 1_000_000)
    out = {"data": f"{spec} (--max-ind-range 1000000)", "batch_size": 1024, "dim": 16,
           "threads": threads, "rounds": rounds, "lr": 0.1, "runs": {}}
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(rounds):
            r = train_torchrec(data)
            out["runs"].setdefault("torchrec", []).append(r)
            for mode in MODES:
                rep = train(data, train_config(mode, threads=threads))
                out["runs"].setdefault(mode, []).append(
                    {k: rep.get(k) for k in ("samples_per_s", "train_seconds", "train_logloss",
                                             "setup_seconds")})
    finally:
        torch.set_num_threads(saved)
    return summarize(out)


def summarize(out) -> tuple[dict, list]:
    """Each run's mean samples/s over the rounds and its ratio to TorchRec's; table rows."""
    runs = out["runs"]
    mean = {name: float(np.mean([r["samples_per_s"] for r in rs])) for name, rs in runs.items()}
    ref = mean["torchrec"]
    out["samples_per_s"] = mean
    out["ratio_vs_torchrec"] = {name: v / ref for name, v in mean.items()}
    out["baseline_vs_torchrec_target"] = 1.0
    out["baseline_vs_torchrec_met"] = out["ratio_vs_torchrec"].get("baseline", 0.0) >= 1.0
    rows = [[f"peer: {name}" + (" (DMP, fused TBE)" if name == "torchrec" else ""),
             out["data"][:40], f"{v:,.0f} samples/s", f"{ref:,.0f} samples/s TorchRec",
             v / ref] for name, v in mean.items()]
    return out, rows

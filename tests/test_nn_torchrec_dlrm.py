"""Interop: TorchRec's own `torchrec.models.dlrm.DLRM`, unchanged, trains with a
`hotline.nn.EmbeddingBagCollection` as its ``embedding_bag_collection`` and gives the losses of
TorchRec's DLRM with its own EBC, sharded by `DistributedModelParallel` into FBGEMM's fused
TBE with the optimizer applied in backward (`apply_optimizer_in_backward`), as TorchRec ships
it on the CPU. Same initial weights (TorchRec's, loaded through DLRM's state dict), dense parts
under `torch.optim.SGD` on both; every step's loss and the final tables to 1e-6."""
import pytest
import torch

torchrec = pytest.importorskip("torchrec")
from torchrec import EmbeddingBagConfig, KeyedJaggedTensor  # noqa: E402
from torchrec.distributed import DistributedModelParallel  # noqa: E402
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology  # noqa: E402
from torchrec.distributed.planner.types import ParameterConstraints  # noqa: E402
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.optim import RowWiseAdagrad  # noqa: E402
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward  # noqa: E402
from torchrec.optim.optimizers import in_backward_optimizer_filter  # noqa: E402

from hotline.bench.peer import _quiet, process_group  # noqa: E402
from hotline.nn import EmbeddingBagCollection  # noqa: E402
from test_nn import close, one_thread  # noqa: E402,F401  (one_thread: autouse fixture)

DIM, DENSE, BATCH, STEPS, LR = 8, 4, 32, 100, 0.05
# The embeddings' rate: with SGD a row's gradient is ~1/BATCH of the loss's, so a larger rate
# makes the losses feel the embedding updates (a doubled rate shows from step 1)
EMB_LR = {"sgd": 1.0, "rowwise_adagrad": LR}
# Row-wise Adagrad on multi-hot bags: eps bounds the step of a row whose summed gradient
# nearly cancels (tests/test_nn.py's EPS_ROWWISE)
EPS = 1e-4
SIZES = (50, 100, 200, 300)
TORCHREC_OPTIM = {"sgd": torch.optim.SGD, "rowwise_adagrad": RowWiseAdagrad}
EBC = "sparse_arch.embedding_bag_collection.embedding_bags"


def tables():
    return [EmbeddingBagConfig(name=f"t{t}", embedding_dim=DIM, num_embeddings=n,
                               feature_names=[f"f{t}"]) for t, n in enumerate(SIZES)]


def dlrm(ebc):
    return DLRM(embedding_bag_collection=ebc, dense_in_features=DENSE,
                dense_arch_layer_sizes=[16, DIM], over_arch_layer_sizes=[16, 1])


def torchrec_fused_dlrm(optimizer):
    """TorchRec's DLRM under DMP (one rank): every table table-wise in the fused TBE, the
    embedding optimizer fused into backward."""
    torch.manual_seed(0)
    model = dlrm(torchrec.EmbeddingBagCollection(tables=tables(), device=torch.device("meta")))
    kwargs = {"lr": EMB_LR[optimizer]} | ({} if optimizer == "sgd" else {"eps": EPS})
    apply_optimizer_in_backward(TORCHREC_OPTIM[optimizer], model.sparse_arch.parameters(), kwargs)
    constraints = {c.name: ParameterConstraints(sharding_types=["table_wise"], compute_kernels=["fused"])
                   for c in tables()}
    with _quiet():
        planner = EmbeddingShardingPlanner(topology=Topology(world_size=1, compute_device="cpu"),
                                           constraints=constraints)
        dmp = DistributedModelParallel(model, device=torch.device("cpu"),
                                       plan=planner.collective_plan(model))
    kernels = {str(p.compute_kernel) for p in
               dmp.plan.plan["sparse_arch.embedding_bag_collection"].values()}
    assert kernels == {"fused"}, kernels
    return dmp


def plain_state(model):
    """``model``'s state dict as plain tensors (one rank: a ShardedTensor's one local shard)."""
    return {k: (v.local_shards()[0].tensor if hasattr(v, "local_shards") else v).detach().clone()
            for k, v in model.state_dict().items()}


def batches(seed=5):
    """Multi-hot bags of 0-3 skewed ids per feature (empty bags included), dense features and
    click labels."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.tensor(SIZES).repeat_interleave(BATCH)
    for _ in range(STEPS):
        lengths = torch.randint(0, 4, (len(SIZES) * BATCH,), generator=g)
        bag_rows = rows.repeat_interleave(lengths)
        values = (torch.rand(bag_rows.numel(), generator=g) ** 3 * bag_rows).long()
        kjt = KeyedJaggedTensor(keys=[f"f{t}" for t in range(len(SIZES))], values=values, lengths=lengths)
        yield (torch.randn(BATCH, DENSE, generator=g), kjt,
               torch.randint(0, 2, (BATCH,), generator=g).float())


@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("placement", ["host", "hotline"])
def test_torchrec_dlrm_trains_with_hotline_collection(placement, optimizer):
    with process_group():
        ref = torchrec_fused_dlrm(optimizer)
        start = plain_state(ref)
        # "hotline" through model://: the device's learner picks 100 hot rows over the first
        # 10 batches, then refreshes every 30 (rows enter and leave the hot set mid-run)
        store = ({"hot_rows": 100, "hot_set": "learn", "learn_window": 10, "refresh": "every:30"}
                 if placement == "hotline" else {})
        ebc = EmbeddingBagCollection(tables(), placement=placement, device_url="model://",
                                     optimizer=optimizer, lr=EMB_LR[optimizer], device="cpu",
                                     optimizer_options=None if optimizer == "sgd" else {"eps": EPS},
                                     **store)
        ours = dlrm(ebc)
        ours.load_state_dict(start)     # TorchRec's weights, dense and embedding, by DLRM's keys
        opts = [torch.optim.SGD(dict(in_backward_optimizer_filter(ref.named_parameters())).values(), lr=LR),
                torch.optim.SGD(ours.parameters(), lr=LR)]
        data = list(batches())
        for step, (dense, kjt, labels) in enumerate(data):
            losses = []
            for model, opt in zip((ref, ours), opts):
                opt.zero_grad()
                logits = model(dense, kjt).squeeze(-1)
                if model is ours and step + 1 < len(data):   # the next batch's rows move meanwhile
                    ebc.prefetch(data[step + 1][1])
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            close(losses[1], losses[0], f"loss at step {step}")
        end, got = plain_state(ref), ours.state_dict()
    for t in range(len(SIZES)):
        key = f"{EBC}.t{t}.weight"
        assert not torch.equal(end[key], start[key]), f"table {t} never trained"
        close(got[key], end[key], f"table {t}")
    if placement == "hotline":
        loads = ebc.store.counters()["loads"]
        assert [r["step"] for r in loads] == [10, 40, 70] and all(r["left"] for r in loads[1:]), loads
    ebc.close()

"""hotline.nn's EmbeddingBagCollection against independent references: FBGEMM's fused TBE on the
CPU (EXACT_SGD, EXACT_ROWWISE_ADAGRAD), TorchRec's EmbeddingBagCollection with torch.optim.SGD,
and nn.EmbeddingBag with torch.optim.SparseAdam (FBGEMM's CPU TBE has no Adam). Same initial
weights; every step's loss and the final tables agree to 1e-6 of their scale."""
import doctest

import numpy as np
import pytest
import torch
from torch import nn

from helpers import TABLE_RTOL, real_file
from hotline.contract.errors import HotlineError
from hotline.contract.keys import ROW_BITS
from hotline.data import load_dataset, open_data
from hotline.data.readers import Dataset
from hotline.nn import EmbeddingBagCollection, collection
from hotline.nn.inputs import batches
from hotline.nn.optim import OPTIMIZERS

torchrec = pytest.importorskip("torchrec")
tbe_ops = pytest.importorskip("fbgemm_gpu.split_table_batched_embeddings_ops_training")
from fbgemm_gpu.split_table_batched_embeddings_ops_common import (  # noqa: E402
    EmbeddingLocation, PoolingMode)
from torchrec import EmbeddingBagConfig, KeyedJaggedTensor, PoolingType  # noqa: E402

DIM = 8
EPS_ADAM = 1e-8
OPTIMIZER_NAMES = {cls: name for name, cls in OPTIMIZERS.items()}
# Row-wise Adagrad's step is lr * g / (sqrt(G) + eps): for a row whose gradient is tiny and
# near-cancelled (multi-hot bags summed in another order than FBGEMM's) the step is still
# ~lr, so a last-bit difference in g shows as ~1e-6 in the weights; multi-hot runs use an eps
# that bounds that gain (FBGEMM's default 1e-8 elsewhere).
EPS_ROWWISE = {"single": 1e-8, "multi": 1e-4}
TBE_OPTIM = {"sgd": tbe_ops.OptimType.EXACT_SGD,
             "rowwise_adagrad": tbe_ops.OptimType.EXACT_ROWWISE_ADAGRAD}


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny batches: one thread is several times faster, and the cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def configs(sizes, pooling="SUM", dims=None):
    poolings = pooling if isinstance(pooling, list) else [pooling] * len(sizes)
    dims = dims or [DIM] * len(sizes)
    return [EmbeddingBagConfig(name=f"t{t}", embedding_dim=d, num_embeddings=int(n),
                               feature_names=[f"f{t}"], pooling=PoolingType[p])
            for t, (n, p, d) in enumerate(zip(sizes, poolings, dims))]


def synth(samples=12_800, rows=500, seed=3, features=8):
    """The built-in generator (Criteo-like, with drift), its first ``features`` tables folded
    to ``rows``."""
    ds = open_data(f"synth:criteo-kaggle:{samples}:{seed}:drift=0.05", max_ind_range=rows)
    n, f = ds.lengths.shape
    return Dataset(ds.lengths[:, :features], ds.indices.reshape(n, f)[:, :features].ravel(),
                   ds.table_sizes[:features], name=ds.name)


def multi_hot(ds, seed=0, most=4):
    """``ds``'s per-feature id streams cut into bags of 0 .. most-1 ids (empty bags included)."""
    n, f = ds.lengths.shape
    cols = ds.indices.reshape(n, f)
    lengths = np.random.default_rng(seed).integers(0, most, (n, f))
    start = np.cumsum(lengths, axis=0) - lengths
    feat = np.repeat(np.tile(np.arange(f), n), lengths.ravel())
    first = np.repeat(start.ravel(), lengths.ravel())
    k = np.arange(len(feat)) - np.repeat(np.cumsum(lengths.ravel()) - lengths.ravel(), lengths.ravel())
    return Dataset(lengths.astype(np.int32), cols[(first + k) % n, feat], ds.table_sizes, name=ds.name)


def loss_of(out, step):
    """A nonlinear loss, so that every step's gradient depends on the updated rows."""
    g = torch.Generator().manual_seed(step)
    proj = torch.randn(out.shape[1], generator=g) / out.shape[1] ** 0.5
    target = torch.randn(out.shape[0], generator=g)
    return ((out @ proj - target) ** 2).mean()


def weights_of(ds, seed=7, dims=None):
    g = torch.Generator().manual_seed(seed)
    dims = dims or [DIM] * len(ds.table_sizes)
    return [torch.rand(int(n), d, generator=g) * 0.2 - 0.1 for n, d in zip(ds.table_sizes, dims)]


def close(a, b, what, rtol=1e-6):
    """``a`` equals ``b`` to ``rtol`` of ``b``'s largest magnitude."""
    err = (a - b).abs().max().item()
    scale = b.abs().max().item()
    assert err <= rtol * scale, f"{what}: max error {err:.3g}, scale {scale:.3g}"


def ours(ds, weights, optimizer, placement="host", pooling="SUM", eps=1e-8):
    # "hotline": a hot set planned from the first 8 batches loads mid-run (model://)
    store = {"hot_rows": 1000, "profile_batches": 8} if placement == "hotline" else {}
    dims = [w.shape[1] for w in weights]
    ebc = EmbeddingBagCollection(configs(ds.table_sizes, pooling, dims), placement=placement,
                                 optimizer=optimizer, lr=0.05, device="cpu",
                                 optimizer_options=None if optimizer == "sgd" else {"eps": eps},
                                 **store)
    ebc.load_state_dict({f"embedding_bags.t{t}.weight": w for t, w in enumerate(weights)})
    return ebc


def tbe_reference(ds, weights, optimizer, pooling="SUM", eps=1e-8):
    tbe = tbe_ops.SplitTableBatchedEmbeddingBagsCodegen(
        [(int(n), w.shape[1], EmbeddingLocation.HOST, tbe_ops.ComputeDevice.CPU)
         for n, w in zip(ds.table_sizes, weights)],
        optimizer=TBE_OPTIM[optimizer], learning_rate=0.05, eps=eps,
        pooling_mode=PoolingMode[pooling])
    for dst, w in zip(tbe.split_embedding_weights(), weights):
        dst.copy_(w)
    return tbe


def run_both(ebc, ref, ds, batch_size, steps, weighted=False, after=None):
    """Train ``ebc`` and ``ref`` (same call signature; ``after()`` after each backward: a
    reference's optimizer step) side by side; compare every loss."""
    g = torch.Generator().manual_seed(11)
    done = 0
    for step, (idx, off) in enumerate(batches(ds, batch_size)):
        if step == steps:
            break
        psw = torch.rand(idx.numel(), generator=g) if weighted else None
        losses = []
        for m in (ebc, ref):
            loss = loss_of(m(idx, off, psw) if weighted else m(idx, off), step)
            loss.backward()
            losses.append(loss.detach())
        if after is not None:
            after()
        close(losses[0], losses[1], f"loss at step {step}")
        done += 1
    assert done == steps, f"only {done} batches"


def tables_of(ebc):
    sd = ebc.state_dict()
    return [sd[f"embedding_bags.{c.name}.weight"] for c in ebc.embedding_bag_configs()]


def compare_tables(ebc, ref_tables):
    for t, (a, b) in enumerate(zip(tables_of(ebc), ref_tables)):
        close(a, b, f"table {t}", TABLE_RTOL[OPTIMIZER_NAMES[type(ebc.optimizer)]])


# -- equivalence with FBGEMM's fused TBE --------------------------------------------------
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("placement,pooling,hot,weighted", [
    ("host", "SUM", "single", False),
    ("device", "SUM", "multi", False),
    ("host", "MEAN", "multi", False),
    ("host", "SUM", "multi", True),
    ("hotline", "SUM", "multi", False),
])
def test_matches_fbgemm_tbe_on_generator(optimizer, placement, pooling, hot, weighted):
    ds = synth()
    if hot == "multi":
        ds = multi_hot(ds)
    w = weights_of(ds)
    eps = EPS_ROWWISE[hot]
    ebc = ours(ds, w, optimizer, placement, pooling, eps)
    ref = tbe_reference(ds, w, optimizer, pooling, eps)
    run_both(ebc, ref, ds, 64, 200, weighted)
    compare_tables(ebc, ref.split_embedding_weights())
    if optimizer == "rowwise_adagrad":
        sd = ebc.state_dict()
        for t, s in enumerate(ref.split_optimizer_states()):
            close(sd[f"embedding_bags.t{t}.momentum1"][:, 0], s[0], f"table {t} accumulator")


MIXED_DIMS = [8, 4, 12, 4, 8, 4, 12, 8]


@pytest.mark.parametrize("optimizer,placement", [
    ("sgd", "host"), ("sgd", "hotline"), ("rowwise_adagrad", "device"),
    ("rowwise_adagrad", "hotline"), ("adam", "host"), ("adam", "hotline")])
def test_tables_of_several_dims(optimizer, placement):
    """Tables of dims 4..12 (stored zero-padded to 12; FBGEMM's TBE takes multiples of 4):
    losses, tables and row-wise
    accumulators equal FBGEMM's TBE with those dims (Adam: SparseAdam), multi-hot, over a
    hot-set load; the output and the KeyedTensor give each feature its own dim; FBGEMM's
    in-place kernel runs where it applies (SGD, hotline)."""
    ds = multi_hot(synth())
    w = weights_of(ds, dims=MIXED_DIMS)
    eps = EPS_ROWWISE["multi"] if optimizer == "rowwise_adagrad" else 1e-8
    ebc = ours(ds, w, optimizer, placement, eps=eps)
    assert (ebc._kernel is not None) == (optimizer == "sgd" and placement == "hotline")
    ref = SparseAdamReference(w) if optimizer == "adam" else tbe_reference(ds, w, optimizer,
                                                                          eps=eps)
    run_both(ebc, ref, ds, 64, 120, after=ref.update if optimizer == "adam" else None)
    compare_tables(ebc, ref.tables() if optimizer == "adam" else ref.split_embedding_weights())
    if optimizer == "rowwise_adagrad":
        sd = ebc.state_dict()
        for t, s in enumerate(ref.split_optimizer_states()):
            close(sd[f"embedding_bags.t{t}.momentum1"][:, 0], s[0], f"table {t} accumulator")
    kjt = KeyedJaggedTensor(keys=[f"f{t}" for t in range(8)], values=torch.tensor([1] * 8),
                            lengths=torch.ones(8, dtype=torch.int64))
    with torch.no_grad():
        kt = ebc(kjt)
    assert kt.length_per_key() == MIXED_DIMS and kt.values().shape == (1, sum(MIXED_DIMS))
    for t in (1, 3):   # a narrow table's state_dict holds its own dim
        assert ebc.state_dict()[f"embedding_bags.t{t}.weight"].shape[1] == MIXED_DIMS[t]
    ebc.close()


@pytest.mark.realdata
@pytest.mark.parametrize("name,optimizer,pooling", [
    ("criteo_kaggle/train_head1999.csv.gz", "rowwise_adagrad", "SUM"),
    ("criteo_kaggle/train_rows39.80M-39.99M_sub1pct.csv.gz", "sgd", "SUM"),
    ("alimama/dmr_alimama_sampled_train500.csv.gz", "sgd", "MEAN"),   # 3 features of 50 ids
    ("movielens/ml-100k.inter.gz", "sgd", "SUM"),
])
def test_matches_fbgemm_tbe_on_real_files(name, optimizer, pooling):
    ds = load_dataset(real_file(name), max_ind_range=5000).head(6400)
    w = weights_of(ds)
    eps = EPS_ROWWISE["single" if ds.single_hot else "multi"]
    ebc = ours(ds, w, optimizer, pooling=pooling, eps=eps)
    ref = tbe_reference(ds, w, optimizer, pooling, eps)
    batch = 32 if ds.num_samples < 6400 else 64
    run_both(ebc, ref, ds, batch, ds.num_samples // batch)
    compare_tables(ebc, ref.split_embedding_weights())


# -- Adam against nn.EmbeddingBag + torch.optim.SparseAdam ----------------------------------
class SparseAdamReference:
    """One sparse nn.EmbeddingBag per table with SparseAdam (lazy Adam, global step count);
    `update` after backward."""

    def __init__(self, weights):
        self.bags = [nn.EmbeddingBag.from_pretrained(w.clone(), freeze=False, mode="sum",
                                                     sparse=True, include_last_offset=True)
                     for w in weights]
        self.opt = torch.optim.SparseAdam([b.weight for b in self.bags], lr=0.05)

    def __call__(self, idx, off):
        batch = (off.numel() - 1) // len(self.bags)
        outs = []
        for t, bag in enumerate(self.bags):
            o = off[t * batch:(t + 1) * batch + 1]
            outs.append(bag(idx[o[0]:o[-1]], o - o[0]))
        return torch.cat(outs, dim=1)

    def update(self):
        # FBGEMM adds eps to sqrt(v / (1 - b2^t)), SparseAdam to sqrt(v): rescaled, the same
        group = self.opt.param_groups[0]
        t = self.opt.state[self.bags[0].weight].get("step", 0) + 1
        group["eps"] = EPS_ADAM * (1 - group["betas"][1] ** t) ** 0.5
        self.opt.step()
        self.opt.zero_grad()

    def tables(self):
        return [b.weight.detach() for b in self.bags]


@pytest.mark.parametrize("placement,data", [("host", "single"), ("device", "multi"), ("hotline", "multi"),
                                            pytest.param("host", "movielens", marks=pytest.mark.realdata)])
def test_adam_matches_sparse_adam(placement, data):
    if data == "movielens":
        ds = load_dataset(real_file("movielens/ml-100k.inter.gz"))
    else:
        ds = synth() if data == "single" else multi_hot(synth())
    w = weights_of(ds)
    ebc, ref = ours(ds, w, "adam", placement), SparseAdamReference(w)
    run_both(ebc, ref, ds, 64, 200, after=ref.update)
    compare_tables(ebc, ref.tables())


# -- TorchRec's interface -------------------------------------------------------------------
@pytest.mark.parametrize("placement,weighted", [("host", False), ("device", False), ("host", True)])
def test_kjt_matches_torchrec_ebc_with_sgd(placement, weighted):
    """Mixed sum and mean tables (sum only with the KJT's weights), multi-hot, a feature order
    of the input unlike the tables': TorchRec's own EBC (dense SGD equals exact SGD) as the
    reference."""
    ds = multi_hot(synth(samples=6400, features=4))
    pooling = "SUM" if weighted else ["SUM", "MEAN", "SUM", "MEAN"]
    ref = torchrec.EmbeddingBagCollection(tables=configs(ds.table_sizes, pooling), is_weighted=weighted)
    ebc = EmbeddingBagCollection(configs(ds.table_sizes, pooling), placement=placement,
                                 optimizer="sgd", lr=0.05, device="cpu", is_weighted=weighted)
    ebc.load_state_dict(ref.state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    keys = [f"f{t}" for t in (2, 0, 3, 1)]
    perm = [int(k[1:]) for k in keys]
    for step, (idx, off) in enumerate(batches(ds, 64)):
        if step == 100:
            break
        n, batch = len(keys), (off.numel() - 1) // len(keys)
        lengths = off.diff().view(n, batch)[perm]
        values = torch.cat([idx[off[t * batch]:off[(t + 1) * batch]] for t in perm])
        weights = torch.rand(values.numel(), generator=torch.Generator().manual_seed(step))
        kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths.reshape(-1),
                                weights=weights if weighted else None)
        ours_kt, ref_kt = ebc(kjt), ref(kjt)
        assert ours_kt.keys() == ref_kt.keys() and ours_kt.length_per_key() == ref_kt.length_per_key()
        losses = []
        for kt in (ours_kt, ref_kt):
            loss = loss_of(kt.values(), step)
            loss.backward()
            losses.append(loss.detach())
        opt.step()
        opt.zero_grad()
        close(losses[0], losses[1], f"loss at step {step}")
    sd = ref.state_dict()
    compare_tables(ebc, [sd[f"embedding_bags.t{t}.weight"] for t in range(4)])


# -- state_dict -------------------------------------------------------------------------------
def test_state_dict_round_trips_with_torchrec_and_embedding_bag():
    cfgs = configs([30, 20])
    ebc = EmbeddingBagCollection(cfgs, optimizer="sgd", device="cpu")
    ref = torchrec.EmbeddingBagCollection(tables=cfgs)
    ref.load_state_dict(ebc.state_dict())            # strict: the same keys
    kjt = KeyedJaggedTensor(keys=["f0", "f1"], values=torch.tensor([1, 29, 3, 19, 0]),
                            lengths=torch.tensor([2, 1, 1, 1]))
    assert torch.equal(ebc(kjt).values(), ref(kjt).values())
    with torch.no_grad():
        for bag in ref.embedding_bags.values():
            bag.weight.mul_(2)
    ebc.load_state_dict(ref.state_dict())
    assert torch.equal(ebc(kjt).values(), ref(kjt).values())
    one = EmbeddingBagCollection(configs([30]), optimizer="sgd", device="cpu")
    bag = nn.EmbeddingBag(30, DIM, mode="sum")
    one.load_state_dict(bag.state_dict())
    assert torch.equal(one.state_dict()["embedding_bags.t0.weight"], bag.weight.detach())
    bag.load_state_dict({"weight": ebc.state_dict()["embedding_bags.t0.weight"]})
    assert torch.equal(bag.weight.detach(), ref.embedding_bags["t0"].weight.detach())


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adam"])
def test_optimizer_state_round_trips(optimizer):
    """Train, save, load into a fresh collection, train both on: identical; a weights-only
    load (TorchRec's dict) starts the state at zero."""
    ds = multi_hot(synth(samples=1280, features=3))
    make = lambda: EmbeddingBagCollection(configs(ds.table_sizes), optimizer=optimizer,  # noqa: E731
                                          lr=0.05, device="cpu")
    a, b = make(), make()
    it = batches(ds, 64)
    for step in range(5):
        loss_of(a(*next(it)), step).backward()
    sd = a.state_dict()
    assert {k.rpartition(".")[2] for k in sd} >= {"weight", "momentum1", "optimizer_step"}
    assert sd["embedding_bags.t0.momentum1"].abs().sum() > 0
    b.load_state_dict(sd)
    for step in range(5, 10):
        idx, off = next(it)
        for m in (a, b):
            loss_of(m(idx, off), step).backward()
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    b.load_state_dict({k: v for k, v in sd.items() if k.endswith(".weight")})
    assert int(b.state_dict()["optimizer_step"]) == 0
    assert b.state_dict()["embedding_bags.t0.momentum1"].abs().sum() == 0


# -- errors and misuse ------------------------------------------------------------------------
def small(**kw):
    return EmbeddingBagCollection(configs([10, 5], ["SUM", "MEAN"]), device="cpu", **kw)


@pytest.mark.parametrize("call,message", [
    (lambda m: m(torch.tensor([3, 5]), torch.tensor([0, 1, 2])), "feature 'f1': id 5 is beyond table 't1' (5 rows)"),
    (lambda m: m(torch.tensor([-1, 0]), torch.tensor([0, 1, 2])), "feature 'f0': id -1"),
    (lambda m: m(torch.tensor([1.0, 2.0]), torch.tensor([0, 1, 2])), "indices: a 1-D int32 or int64"),
    (lambda m: m(torch.tensor([1, 2]), torch.tensor([0, 2])), "offsets: 2 entries, expected F * B + 1"),
    (lambda m: m(torch.tensor([1, 2]), torch.tensor([0, 1, 3])), "offsets: must rise from 0"),
    (lambda m: m(torch.tensor([1, 2])), "offsets are needed"),
    (lambda m: m(torch.tensor([1, 2]), torch.tensor([0, 1, 2]), torch.ones(2)), "per_sample_weights need sum"),
    (lambda m: m(KeyedJaggedTensor(keys=["f0", "fx"], values=torch.tensor([1, 2]),
                                   lengths=torch.tensor([1, 1]))), "unknown feature 'fx'"),
    (lambda m: m(KeyedJaggedTensor(keys=["f0"], values=torch.tensor([1]),
                                   lengths=torch.tensor([1]))), "feature 'f1' is missing"),
    (lambda m: m([1, 2]), "a KeyedJaggedTensor or (indices, offsets) expected"),
    (lambda m: m.load_state_dict({"embedding_bags.t0.weight": torch.zeros(11, DIM),
                                  "embedding_bags.t1.weight": torch.zeros(5, DIM)}),
     "embedding_bags.t0.weight: shape (11, 8) given, table 't0' holds (10, 8)"),
])
def test_bad_input_raises_one_line(call, message):
    m = small()
    before = m.state_dict()
    with pytest.raises(HotlineError) as e:
        call(m)
    assert message in str(e.value) and "\n" not in str(e.value)
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_single_hot_check_writes_the_keys_sample_by_sample(dtype):
    """The single-hot pass (`_single_hot_keys`) against a reference: the keys of dense ids
    (each table's every row, in turn, and its last row) sample by sample, the first id beyond
    its table feature by feature, and a batch of one lookup per bag on average (an empty and a
    double bag) handed to the general check."""
    sizes, batch = [7, 1, 300, 64], 75
    m = EmbeddingBagCollection(configs(sizes), device="cpu")
    ids = np.stack([np.arange(batch) % n if f % 2 else (n - 1 - np.arange(batch) % n)
                    for f, n in enumerate(sizes)])          # [F, B], each table's dense rows
    ref = (np.arange(len(sizes))[None, :] << ROW_BITS | ids.T).ravel()   # sample-major keys
    off = torch.arange(ids.size + 1)
    c = m._keys(torch.from_numpy(ids.ravel()).to(dtype), off)
    assert c.single_hot and c.by_sample.dtype == np.uint32
    assert np.array_equal(c.by_sample, ref)
    assert np.array_equal(c.keys_by_sample(m._sample_order(c)[0]), ref)
    for f, s, v in [(2, 74, 300), (0, 0, -1), (3, 5, 64), (1, 40, 1)]:
        bad = ids.copy()
        bad[f, s] = v
        bad[3, 70] = 99    # a later one: the first, feature by feature, is named
        with pytest.raises(HotlineError, match=f"feature 'f{f}': id {v} is beyond table 't{f}' "
                           f"\\({sizes[f]} rows\\)"):
            m._keys(torch.from_numpy(bad.ravel()).to(dtype), off)
    uneven = off.clone()
    uneven[1:3] = torch.tensor([0, 2])   # bag 0 empty, bag 1 holds two lookups
    c = m._keys(torch.from_numpy(ids.ravel()).to(dtype), uneven)
    assert not c.single_hot and c.by_sample is None
    assert np.array_equal(c.keys.numpy(), (np.repeat(np.arange(4), batch) << ROW_BITS)
                          | ids.ravel())


@pytest.mark.parametrize("kw,message", [
    ({"optimizer": "lamb"}, "optimizer 'lamb': expected one of sgd, rowwise_adagrad, adam"),
    ({"placement": "gpu"}, "placement 'gpu': expected one of host, device, hotline"),
    ({"hot_rows": 4}, "placement 'host' takes no option hot_rows"),
])
def test_bad_construction_raises_one_line(kw, message):
    with pytest.raises(HotlineError, match=message.replace("(", r"\(")):
        small(**kw)


def test_bad_tables_raise_one_line():
    bad = configs([10, 5])
    bad[1].embedding_dim = 0
    with pytest.raises(HotlineError, match="table 't1': embedding_dim 0, expected a positive"):
        EmbeddingBagCollection(bad)
    with pytest.raises(HotlineError, match="table 't0' is configured twice"):
        EmbeddingBagCollection(configs([10]) + configs([5]))


@pytest.mark.parametrize("placement", ["host", "hotline"])
def test_one_forward_per_backward(placement):
    """A forward whose backward never ran leaves its rows as they were; its late backward
    is refused (its rows are gone) instead of writing stale rows back. "hotline": FBGEMM's
    in-place kernel, whose own autograd node would update the rows."""
    kw = {"placement": "hotline", "kernel": "fbgemm"} if placement == "hotline" else {}
    pooling = "SUM" if placement == "hotline" else ["SUM", "MEAN"]   # FBGEMM's: one pooling
    m = EmbeddingBagCollection(configs([10, 5], pooling), device="cpu", lr=0.5, **kw)
    before = m.state_dict()
    idx, off = torch.tensor([1, 2]), torch.tensor([0, 1, 2])
    first = m(idx, off).sum()
    m(idx, off)                   # e.g. an evaluation forward without no_grad
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(HotlineError, match="backward of a batch whose rows are gone"):
        first.backward()
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
    again = m(idx, off).sum()
    again.backward(retain_graph=True)
    after = m.state_dict()["embedding_bags.t0.weight"]
    assert not torch.equal(after, before["embedding_bags.t0.weight"])
    with pytest.raises(HotlineError, match="backward ran twice"):
        again.backward()
    assert torch.equal(m.state_dict()["embedding_bags.t0.weight"], after)
    assert not torch.equal(m.state_dict()["embedding_bags.t0.weight"], before["embedding_bags.t0.weight"])


def test_class_example_runs():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(collection.EmbeddingBagCollection, "EmbeddingBagCollection"):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 5



def test_readme_python_blocks_run():
    """README.md's ```python blocks of hotline.nn ("Start here"), exactly as written, in a
    fresh interpreter from the repo root: they must run, and backward must move the rows."""
    import re
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(),
                                    re.S) if "from hotline.nn import" in b]
    assert blocks, "README.md has no python block with hotline.nn"
    weight = "ebc.state_dict()['embedding_bags.t0.weight']"
    for code in blocks:
        step = "pooled.values().sum().backward()"
        assert step in code
        # the block's own lines, with the rows read before and after its backward
        script = (code.replace(step, f"w0 = {weight}.clone()\n{step}", 1)
                  + f"assert pooled.values().shape == (3, 16)\n"
                    f"assert not torch.equal({weight}, w0), 'backward left the rows as they were'\n")
        p = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]

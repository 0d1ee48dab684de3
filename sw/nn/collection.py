"""`EmbeddingBagCollection`: TorchRec's embedding-bag collection with placed storage and an
FBGEMM-style optimizer fused into backward (docs/nn.md)."""
import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from hotline.contract.errors import HotlineError
from hotline.contract.keys import MAX_ROWS, MAX_TABLES, ROW_BITS
from hotline.model.compiled import compiled

from .dist import Ranks
from .layout import RowLayout
from .kernels import TBEKernel, fbgemm_cpu
from .optim import SGD, make_optimizer
from .stores import DeviceStore, HostStore, RowStore

PLACEMENTS = ("host", "device", "hotline")
POOLINGS = ("SUM", "MEAN")
KERNELS = ("auto", "fbgemm", "torch")


@dataclass
class TableConfig:
    """The fields of TorchRec's ``EmbeddingBagConfig`` the collection reads, for code that
    runs without TorchRec."""
    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: list
    pooling: str = "SUM"


@dataclass
class _Batch:
    """One forward's rows, kept until its backward updates them."""
    keys: torch.Tensor      # unique, ascending
    rows: torch.Tensor      # [n, width] on the store's device
    inverse: torch.Tensor   # lookup -> row of ``rows``
    offsets: torch.Tensor   # [F * B + 1]
    weights: torch.Tensor | None
    scale: torch.Tensor | None   # per bag: 1 / length for mean pooling


class _SampleOrder(NamedTuple):
    """A batch's lookups sample by sample (the device's stream order) against FBGEMM's feature
    by feature layout."""
    by_sample: torch.Tensor   # each sample-major lookup's index in the input
    inverse: np.ndarray       # each input lookup's place sample by sample
    grid: tuple | None = None   # single-hot: (features, batch), the order being a transpose

    def to_samples(self, a: np.ndarray) -> np.ndarray:
        """``a`` (a value per input lookup) sample by sample."""
        if self.grid is not None:   # a strided copy: about 30% less than a gather
            return a.reshape(self.grid).T.ravel()
        return a.take(self.by_sample.numpy())

    def to_features(self, a: np.ndarray) -> np.ndarray:
        """``a`` (a value per lookup, sample by sample) in the input's order."""
        if self.grid is not None:
            return a.reshape(self.grid[::-1]).T.ravel()
        return a.take(self.inverse)


def _single_hot_keys(ind, off, rows, bits, out) -> int:
    """`EmbeddingBagCollection._keys`' pass over a batch that may be single-hot (compiled:
    `_single_hot_keys_kernel`): -2 if ``off`` is not 0, 1, ..., len(ind); else the first
    lookup, feature by feature, whose id is beyond its feature's ``rows`` (-1: none), the
    keys (``bits[f] | id``) written sample by sample to ``out`` (uint32) on the way. One read
    of the batch, where numpy's checks and transpose read it four times: at B = 1024 x 26,
    42 against 84 us with the batch in the caches; in training it arrives cold, and that
    first read (100-130 us) is most of what is left."""
    for i in range(len(off)):
        if off[i] != i:
            return -2
    n = len(rows)
    batch = len(ind) // n if n else 0
    for f in range(n):
        lim, b = rows[f], bits[f]
        for s in range(batch):
            v = ind[f * batch + s]
            if v < 0 or v >= lim:
                return f * batch + s
            out[s * n + f] = b | v
    return -1


_single_hot_keys_kernel = compiled(_single_hot_keys)


@dataclass
class _Checked:
    """A batch's checked lookups: ``ids`` (int64, each within its feature's table) in the
    input's order, ``offsets`` (an int64 CPU tensor), ``batch`` samples, ``single_hot``
    (every bag holds one lookup), and per feature its ``counts`` of lookups and its
    ``table_bits`` (table << ROW_BITS); ``by_sample``: single-hot, the keys sample by sample
    as `keys_by_sample` gives them, made by the check."""
    ids: np.ndarray
    offsets: torch.Tensor
    batch: int
    single_hot: bool
    counts: np.ndarray
    table_bits: np.ndarray
    by_sample: np.ndarray | None = None

    @cached_property
    def keys(self) -> torch.Tensor:
        """The lookups' keys (int64, table << ROW_BITS | row) in the input's order."""
        return torch.from_numpy(self.ids | np.repeat(self.table_bits, self.counts))

    def keys_by_sample(self, order: _SampleOrder) -> np.ndarray:
        """The keys sample by sample (``order``), as the device's uint32 keys."""
        if order.grid is None:
            return order.to_samples(self.keys.numpy()).astype(np.uint32)
        return self.by_sample   # single-hot: made by the check


@dataclass
class _Announced:
    """A batch given to `prefetch`: its input tensors (and their versions), its `_Checked`
    keys and the sample-major order it was announced in."""
    indices: torch.Tensor
    offsets: torch.Tensor
    indices_version: int
    offsets_version: int
    checked: _Checked
    order: _SampleOrder | None
    unique: tuple | None    # torch.unique's (keys, inverse); None for an in-place kernel

    def same(self, indices, offsets) -> bool:
        """Whether ``indices`` and ``offsets`` are the tensors announced, not modified since."""
        return indices is self.indices and offsets is self.offsets and self.intact()

    def intact(self) -> bool:
        """Whether the tensors announced are unmodified: ``checked`` views them."""
        return (self.indices._version == self.indices_version
                and self.offsets._version == self.offsets_version)

    def equals(self, checked) -> bool:
        """Whether a `_Checked` batch holds the lookups announced."""
        return self.intact() and np.array_equal(checked.ids, self.checked.ids) and \
            torch.equal(checked.offsets, self.checked.offsets)


class _InPlace:
    """One forward through the in-place kernel (`TBEKernel`), pending until its backward."""


class _Lookup(torch.autograd.Function):
    """Pooled bags of a batch; backward updates the batch's rows (fused, no ``step()``). The
    ``anchor`` (an empty tensor that requires grad) makes autograd call backward, as FBGEMM's
    placeholder tensor does."""

    @staticmethod
    def forward(ctx, anchor, ebc, batch):
        ctx.ebc, ctx.batch = ebc, batch
        return ebc._pool(batch)

    @staticmethod
    def backward(ctx, grad):
        ctx.ebc._update(ctx.batch, grad)
        return None, None, None


class EmbeddingBagCollection(nn.Module):
    """Pooled embeddings of several tables, each row updated in backward by a fused optimizer;
    the rows live where ``placement`` puts them.

    Args:
        tables: TorchRec ``EmbeddingBagConfig``s (or objects with its ``name``,
            ``num_embeddings``, ``embedding_dim``, ``feature_names``, ``pooling`` SUM/MEAN and
            optional ``init_fn``). Tables may differ in ``embedding_dim``: rows are stored
            zero-padded to the largest, each feature's bags have its table's dim.
        placement: "host" (rows in host memory), "device" (rows on ``device``) or "hotline"
            (hot rows on ``device``, cold rows in host memory through ``device_url``); or a
            `RowStore` of these tables' rows and the optimizer's row layout (your own: its
            rows are kept, not initialised, as `hotline train` gives its stores).
        optimizer: "sgd", "rowwise_adagrad" or "adam" (FBGEMM's math), learning rate ``lr``.
        kernel: "auto", "fbgemm" or "torch": how a batch is pooled and updated. "fbgemm"
            runs FBGEMM's CPU TBE kernels in place on the "hotline" store's rows (hot table
            and the batch's cold rows, each lookup given its row by the accelerator: no sort
            on the host); it needs the "hotline" placement on the CPU, one process, SGD, a
            largest ``embedding_dim`` that is a multiple of 4, and one pooling for all
            tables (a batch with more cold keys than the staging slots has the rest read
            and written by the host, after the hot and staged rows). "torch": the batch's
            unique rows are gathered, pooled and updated with torch ops (every placement,
            optimizer and device). "auto": "fbgemm" where it applies, else "torch".
        is_weighted: use a KeyedJaggedTensor's weights as per-sample weights (TorchRec's flag).
        device: the torch device of the outputs (and of the rows, placement "device").
        optimizer_options: e.g. ``eps``, ``betas``; store_options: the "hotline" placement's.

    ``forward(kjt) -> KeyedTensor`` (TorchRec) or ``forward(indices, offsets,
    per_sample_weights=None) -> Tensor[B, F * dim]`` (FBGEMM's layout: features in table order,
    bags feature-major, ``offsets`` of length F * B + 1). One forward per backward: a forward
    whose backward has not run when the next forward starts leaves its rows unchanged.

    Data parallel: built while a torch.distributed process group of several ranks is up, the
    collection is one for all ranks (docs/nn.md): each rank gives it its shard of every batch,
    every rank runs each backward (a collective: the rows' gradients are summed over the
    ranks; each row any rank touched gets one update), and the tables start as rank 0's.

    Example::

        >>> import torch
        >>> from torchrec import EmbeddingBagConfig, KeyedJaggedTensor
        >>> from hotline.nn import EmbeddingBagCollection
        >>> ebc = EmbeddingBagCollection(tables=[
        ...     EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=10, feature_names=["f1"]),
        ...     EmbeddingBagConfig(name="t2", embedding_dim=4, num_embeddings=10, feature_names=["f2"])],
        ...     placement="host", optimizer="rowwise_adagrad", lr=0.05)
        >>> kjt = KeyedJaggedTensor(keys=["f1", "f2"], values=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]),
        ...                         offsets=torch.tensor([0, 2, 2, 3, 4, 5, 8]))
        >>> pooled = ebc(kjt)                  # KeyedTensor: B = 3, keys f1, f2
        >>> pooled.values().shape
        torch.Size([3, 8])
        >>> before = ebc.state_dict()["embedding_bags.t1.weight"][0].clone()
        >>> pooled.values().sum().backward()   # rows 0-7 updated here
        >>> bool((ebc.state_dict()["embedding_bags.t1.weight"][0] < before).all())
        True
    """

    def __init__(self, tables, placement: str = "host", device_url: str = "model://",
                 optimizer: str = "sgd", lr: float = 0.01, *, is_weighted: bool = False,
                 device=None, optimizer_options: dict | None = None, kernel: str = "auto",
                 **store_options):
        super().__init__()
        self._configs = list(tables)
        self._check_tables()
        self._dims = [int(c.embedding_dim) for c in self._configs]
        # every row holds max(dims) weights: a narrower table's are zero-padded (zero
        # gradients keep them so), and its bags are narrowed back (`_narrow`)
        self.dim = max(self._dims)
        self._is_weighted = is_weighted
        self._device = torch.device(device if device is not None
                                    else "cuda" if torch.cuda.is_available() else "cpu")
        mixed = len(set(self._dims)) > 1
        options = dict(optimizer_options or {})
        if optimizer == "rowwise_adagrad" and mixed:
            options.setdefault("row_dims", True)
        self.optimizer = make_optimizer(optimizer, lr, **options)
        self.layout = RowLayout(self.dim, self.optimizer.state_floats(self.dim))
        self.features = [f for c in self._configs for f in c.feature_names]
        feature_table = [t for t, c in enumerate(self._configs) for _ in c.feature_names]
        self._feature_dims = [self._dims[t] for t in feature_table]
        self._columns = None if not mixed else torch.cat(
            [f * self.dim + torch.arange(d) for f, d in enumerate(self._feature_dims)])
        self._feature_table = np.asarray(feature_table, np.int64)
        self._feature_rows = np.asarray([self._configs[t].num_embeddings for t in feature_table],
                                        np.int64)
        self._feature_mean = torch.tensor([self._pooling(self._configs[t]) == "MEAN"
                                           for t in feature_table])
        self._any_mean = bool(self._feature_mean.any())
        self._ranks = Ranks.current()
        self.store = self._make_store(placement, device_url, store_options)
        self._anchor = torch.zeros(0, requires_grad=True)
        self._pending: _Batch | _InPlace | None = None
        self._announced = None    # `_Announced`: the next forward's batch given to `prefetch`
        self._single_hot = None   # (batch size, `_sample_order` of a single-hot batch of it)
        try:
            self._kernel = self._make_kernel(kernel)
        except BaseException:
            self.store.close()
            raise
        if not isinstance(placement, RowStore):
            self._init_tables()

    # -- construction ---------------------------------------------------------------------
    @staticmethod
    def _pooling(config) -> str:
        pooling = getattr(config, "pooling", "SUM")
        return str(getattr(pooling, "value", pooling)).upper()

    def _check_tables(self) -> None:
        if not self._configs:
            raise HotlineError("tables: at least one EmbeddingBagConfig is needed")
        if len(self._configs) > MAX_TABLES:
            raise HotlineError(f"tables: {len(self._configs)} given, at most {MAX_TABLES}")
        names, features = set(), set()
        for c in self._configs:
            if c.name in names:
                raise HotlineError(f"table {c.name!r} is configured twice")
            names.add(c.name)
            if self._pooling(c) not in POOLINGS:
                raise HotlineError(f"table {c.name!r}: pooling {self._pooling(c)}, expected SUM or MEAN")
            if not 0 < c.num_embeddings <= MAX_ROWS:
                raise HotlineError(f"table {c.name!r}: {c.num_embeddings} rows, expected 1 to {MAX_ROWS}")
            if not 0 < c.embedding_dim:
                raise HotlineError(f"table {c.name!r}: embedding_dim {c.embedding_dim}, expected "
                                   f"a positive number")
            for f in c.feature_names:
                if f in features:
                    raise HotlineError(f"feature {f!r} is configured in two tables")
                features.add(f)

    def _make_store(self, placement, device_url, options) -> RowStore:
        rows = [c.num_embeddings for c in self._configs]
        if isinstance(placement, RowStore):
            if placement.width != self.layout.floats or list(placement.table_rows) != rows:
                raise HotlineError(f"placement: a store of {list(placement.table_rows)} rows of "
                                   f"{placement.width} floats given; the tables need {rows} rows "
                                   f"of {self.layout.floats}")
            return placement
        if placement == "hotline":
            from .hotline_store import HotlineStore  # lazy: the Device API, only for this placement
            return HotlineStore(rows, self.layout, device_url=device_url,
                                torch_device=self._device, ranks=self._ranks, **options)
        if placement not in PLACEMENTS:
            raise HotlineError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")
        if options:
            raise HotlineError(f"placement {placement!r} takes no option {', '.join(options)}")
        if placement == "host":
            return HostStore(rows, self.layout, ranks=self._ranks)
        return DeviceStore(rows, self.layout, self._device, ranks=self._ranks)

    def _make_kernel(self, kernel) -> TBEKernel | None:
        """The in-place kernel over the store's rows, where ``kernel`` asks for it and it
        applies (see the class docstring)."""
        if kernel not in KERNELS:
            raise HotlineError(f"kernel {kernel!r}: expected one of {', '.join(KERNELS)}")
        if kernel == "torch":
            return None
        why = None
        poolings = {self._pooling(c) for c in self._configs}
        if not hasattr(self.store, "gather_lookups"):
            why = "the store has no in-place batches (the 'hotline' placement has)"
        elif self.store.device.type != "cpu":
            why = f"the rows are on {self.store.device} (FBGEMM's CPU build runs on the CPU)"
        elif self._ranks is not None:
            why = "data parallel (the gradients are summed over the ranks first)"
        elif not isinstance(self.optimizer, SGD):
            why = f"optimizer {type(self.optimizer).__name__} keeps state in the row"
        elif self.layout.floats != self.dim or self.dim % 4:
            why = (f"embedding_dim {self.dim} is not a multiple of 4 (FBGEMM's CPU kernels "
                   f"need one)")
        elif len(poolings) > 1:
            why = "the tables pool differently (SUM and MEAN)"
        elif not fbgemm_cpu():
            why = "fbgemm_gpu does not load"
        if why is not None:
            if kernel == "fbgemm":
                raise HotlineError(f"kernel 'fbgemm': {why}")
            return None
        return TBEKernel(self.store.rows, self._feature_table, self.optimizer.lr,
                         mean=poolings == {"MEAN"})

    def _init_tables(self) -> None:
        """Each table's weights by its config's ``init_fn`` (TorchRec's default:
        uniform(-sqrt(1 / rows), sqrt(1 / rows))), state zero; data parallel: rank 0's."""
        for t, c in enumerate(self._configs):
            w = torch.empty(c.num_embeddings, c.embedding_dim)
            init = getattr(c, "init_fn", None)
            if init is None:
                a = math.sqrt(1 / c.num_embeddings)
                nn.init.uniform_(w, -a, a)
            else:
                init(w)
            if self._ranks is not None:
                self._ranks.broadcast(w)
            self._write(t, w, {})

    # -- TorchRec's interface -------------------------------------------------------------
    def embedding_bag_configs(self) -> list:
        return self._configs

    def is_weighted(self) -> bool:
        return self._is_weighted

    @property
    def device(self) -> torch.device:
        return self._device

    def forward(self, features, offsets=None, per_sample_weights=None):
        """A KeyedJaggedTensor -> KeyedTensor; or FBGEMM's (indices, offsets[,
        per_sample_weights]) -> Tensor[B, sum of the features' dims]."""
        if isinstance(features, torch.Tensor):
            return self._lookup(features, offsets, per_sample_weights)
        from torchrec.sparse.jagged_tensor import KeyedTensor  # lazy: TorchRec only for its own types
        values = self._lookup(*self._unpack(features))
        return KeyedTensor(keys=list(self.features), length_per_key=list(self._feature_dims),
                           values=values)

    def prefetch(self, features, offsets=None) -> None:
        """Tell the store the next batch (a KeyedJaggedTensor or indices and offsets)."""
        if not isinstance(features, torch.Tensor):
            features, offsets, _ = self._unpack(features)
        checked = self._keys(features, offsets)
        unique = None if self._kernel is not None else self._unique(checked.keys)
        order = self._announce(checked, None if unique is None else unique[0])
        # the forward of these same tensors (unmodified) reuses the checked keys and unique
        self._announced = _Announced(features, offsets, features._version, offsets._version,
                                     checked, order, unique)

    @staticmethod
    def _unique(keys) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch's unique keys (ascending) and each lookup's place in them."""
        return torch.unique(keys, sorted=True, return_inverse=True)

    def _announce(self, checked, unique) -> _SampleOrder | None:
        """Give the store a batch's `_Checked` lookups (``unique``: their unique keys), sample
        by sample with each sample's count (the device counts every lookup in its learner, and
        samples in its popular split). Returns the sample-major order of the lookups (None:
        the store takes them as they are)."""
        if not self.store.counts_lookups:
            self.store.prefetch(checked.keys)
            return None
        order, per_sample = self._sample_order(checked)
        if getattr(self.store, "takes_positions", False):
            self.store.prefetch(checked.keys_by_sample(order), per_sample, checked=True,
                                unique=unique)
        else:
            self.store.prefetch(torch.from_numpy(order.to_samples(checked.keys.numpy())),
                                per_sample)
        return order

    def _sample_order(self, checked) -> tuple[_SampleOrder, np.ndarray]:
        """A `_Checked` batch's (lookups' order sample by sample, features in order within a
        sample, as a stable sort by sample would give, and its inverse; lookups per sample),
        in O(lookups), on the CPU."""
        n_features, batch, lookups = len(self.features), checked.batch, len(checked.ids)
        if checked.single_hot:   # a transpose
            if self._single_hot is None or self._single_hot[0] != batch:   # made once per size
                order = np.arange(lookups).reshape(n_features, batch).T.ravel()
                inverse = np.arange(lookups).reshape(batch, n_features).T.ravel()
                self._single_hot = (batch, _SampleOrder(torch.from_numpy(order), inverse,
                                                        (n_features, batch)),
                                    np.full(batch, n_features, np.int64))
            return self._single_hot[1:]
        off = checked.offsets.numpy()
        lengths = np.diff(off).reshape(n_features, batch)
        # bag f * batch + s taken sample by sample: bag s * F + f of the new order
        lens, starts = lengths.T.ravel(), off[:-1].reshape(n_features, batch).T.ravel()
        begin = np.cumsum(lens) - lens   # each bag's first lookup in the new order
        order = np.arange(lookups) + np.repeat(starts - begin, lens)
        # (inverse: gathers are cheaper than the scatter ``inverse[order] = arange``)
        to = begin.reshape(batch, n_features).T.ravel()   # bag f * B + s's begin, new order
        inverse = np.arange(lookups) + np.repeat(to - off[:-1], lengths.ravel())
        return _SampleOrder(torch.from_numpy(order), inverse), lengths.sum(0)

    def close(self) -> None:
        self.store.close()

    # -- the lookup -----------------------------------------------------------------------
    def _unpack(self, kjt):
        """A KeyedJaggedTensor's (values, offsets, weights) in the collection's feature order."""
        if not (hasattr(kjt, "keys") and hasattr(kjt, "offsets")):
            raise HotlineError(f"input: a KeyedJaggedTensor or (indices, offsets) expected, "
                               f"got {type(kjt).__name__}")
        keys = list(kjt.keys())
        for k in keys:
            if k not in self.features:
                raise HotlineError(f"unknown feature {k!r} (the collection's: {', '.join(self.features)})")
        for f in self.features:
            if f not in keys:
                raise HotlineError(f"feature {f!r} is missing from the input")
        if keys != self.features:
            kjt = kjt.permute([keys.index(f) for f in self.features])
        weights = kjt.weights_or_none() if self._is_weighted else None
        if self._is_weighted and weights is None:
            raise HotlineError("input: the collection is weighted, the KeyedJaggedTensor has no weights")
        return kjt.values(), kjt.offsets(), weights

    def _keys(self, indices, offsets) -> _Checked:
        """Checked lookups as keys (`_Checked`). The host's work is numpy's on the CPU: the
        accelerator and the host stores take keys there."""
        for what, t in (("indices", indices), ("offsets", offsets)):
            if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64) or t.dim() != 1:
                raise HotlineError(f"{what}: a 1-D int32 or int64 tensor expected, got "
                                   f"{getattr(t, 'dtype', type(t).__name__)} "
                                   f"{tuple(getattr(t, 'shape', ()))}")
        n_features = len(self.features)
        bags = offsets.numel() - 1
        if bags < 0 or bags % n_features:
            raise HotlineError(f"offsets: {offsets.numel()} entries, expected F * B + 1 with F = "
                               f"{n_features} features")
        batch = bags // n_features
        ind = indices.detach().cpu().numpy().astype(np.int64, copy=False)
        off = offsets.detach().cpu().numpy().astype(np.int64, copy=False)
        table_bits = self._feature_table << ROW_BITS
        if len(ind) == bags:   # single-hot, if off is 0, 1, ..., bags: checked in one pass
            by_sample = np.empty(bags, np.uint32)
            at = _single_hot_keys_kernel(ind, off, self._feature_rows, table_bits, by_sample)
            if at >= 0:
                self._beyond(at // batch, ind[at // batch * batch:][:batch])
            if at == -1:
                return _Checked(ind, torch.from_numpy(off), batch, True,
                                np.full(n_features, batch), table_bits, by_sample)
        if off[0] != 0 or off[-1] != len(ind) or (off[1:] < off[:-1]).any():
            raise HotlineError(f"offsets: must rise from 0 to len(indices) = {len(ind)}")
        counts = np.diff(off[np.arange(n_features + 1) * batch])
        used = np.flatnonzero(counts)
        if len(used):   # each feature's ids within its table: its segment's min and max
            seg = (np.cumsum(counts) - counts)[used]
            # as unsigned, a negative id is above every table's rows: one pass finds both
            bad = np.maximum.reduceat(ind.view(np.uint64), seg) >= \
                self._feature_rows[used].astype(np.uint64)
            if bad.any():
                f = int(used[np.argmax(bad)])
                self._beyond(f, ind[seg[np.argmax(bad)]:][:counts[f]])
        return _Checked(ind, torch.from_numpy(off), batch, False, counts, table_bits)

    def _beyond(self, f, ids) -> None:
        """Raise for feature ``f``'s first id of ``ids`` beyond its table."""
        i = int(np.argmax((ids < 0) | (ids >= self._feature_rows[f])))
        c = self._configs[int(self._feature_table[f])]
        raise HotlineError(f"feature {self.features[f]!r}: id {int(ids[i])} is beyond "
                           f"table {c.name!r} ({c.num_embeddings} rows)")

    def _lookup(self, indices, offsets, weights):
        if offsets is None:
            raise HotlineError("forward(indices): offsets are needed too (FBGEMM's layout)")
        a = self._announced
        same = a is not None and a.same(indices, offsets)
        checked = a.checked if same else self._keys(indices, offsets)
        offsets, batch, lookups = checked.offsets, checked.batch, len(checked.ids)
        if weights is not None and (not isinstance(weights, torch.Tensor) or weights.dtype != torch.float32
                                    or tuple(weights.shape) != (lookups,)):
            raise HotlineError(f"per_sample_weights: float32 [{lookups}] expected, got "
                               f"{getattr(weights, 'dtype', type(weights).__name__)} "
                               f"{tuple(getattr(weights, 'shape', ()))}")
        if weights is not None and self._any_mean:
            raise HotlineError("per_sample_weights need sum pooling (a table pools by mean)")
        self._flush()
        self._announced = None
        # evaluation (no grad, nothing announced): the current rows, past the device's
        # pipeline, so its learner and the hot-set schedule see training batches only
        evaluate = not torch.is_grad_enabled() and a is None
        if not evaluate and self._kernel is not None and (a is None or same or a.equals(checked)):
            return self._lookup_in_place(checked, weights, a)
        unique, inverse = a.unique if same and a.unique is not None else \
            self._unique(checked.keys)
        rows = self.store.read(unique) if evaluate else \
            self._gather(checked, unique, inverse, a, same)
        dev = rows.device
        scale = None
        if self._any_mean:
            mean = self._feature_mean.to(dev).repeat_interleave(batch)
            scale = torch.where(mean, 1 / offsets.diff().to(dev).clamp(min=1), 1.0)
        batch_rows = _Batch(unique, rows, inverse.to(dev), offsets.to(dev),
                            None if weights is None else weights.to(dev), scale)
        if torch.is_grad_enabled():
            self._pending = batch_rows
            bags = _Lookup.apply(self._anchor, self, batch_rows)
        else:
            bags = self._pool(batch_rows)
            if not evaluate:
                self.store.scatter(unique, rows)
        n = len(self.features)
        return self._narrow(bags.view(n, batch, self.dim).transpose(0, 1)
                            .reshape(batch, n * self.dim).to(self._device))

    def _narrow(self, out: torch.Tensor) -> torch.Tensor:
        """[B, F * dim] -> each feature's columns of its table's dim (tables of several dims;
        the backward pads the gradient with zeros)."""
        return out if self._columns is None else out.index_select(1, self._columns.to(out.device))

    def _gather(self, checked, unique, inverse, a, same) -> torch.Tensor:
        """The rows of the `_Checked` batch's ``unique`` keys from the store (announced first
        where the store counts lookups and ``a``, the batch announced, is none)."""
        order = None
        if self.store.counts_lookups:
            if a is None:
                order = self._announce(checked, unique)
            else:   # the batch announced may not be this one: the store checks it is
                order = a.order if same else self._sample_order(checked)[0]
        if order is not None and getattr(self.store, "takes_positions", False):
            # each announced lookup's place in ``unique``: the store checks it, sparing a search
            return self.store.gather(unique, positions=inverse[order.by_sample])
        return self.store.gather(unique)

    def _lookup_in_place(self, checked, weights, announced) -> torch.Tensor:
        """The `_Checked` batch through `TBEKernel` on the store's rows: [B, F * dim]."""
        offsets = checked.offsets
        order = announced.order if announced is not None else self._announce(checked, None)
        # deferred: the backward's pre-hook calls update_lookups (no update, no call)
        if order.grid is not None:   # single-hot: transposed by the store as it makes them
            indices = self.store.gather_lookups(grid=order.grid, deferred=True)
        else:   # each announced lookup's row, sample by sample
            indices = torch.from_numpy(order.to_features(
                self.store.gather_lookups(deferred=True).numpy()))
        self._kernel.set_lr(self.optimizer.lr)
        if torch.is_grad_enabled():
            # FBGEMM's own autograd node updates the rows; hooks on it check the batch is
            # still the pending one first and hand it back to the store after (a nested
            # backward through a wrapping Function cost about 0.1 ms per batch)
            b = self._pending = _InPlace()
            bags = self._kernel(indices, offsets, weights)
            bags.grad_fn.register_prehook(lambda grads: self._claim_in_place(b))
            bags.grad_fn.register_hook(lambda grads_in, grads_out: self._kernel_updated())
        else:
            bags = self._kernel(indices, offsets, weights)
            self.store.scatter_lookups()
        return self._narrow(bags.to(self._device))

    def _claim(self, b) -> None:
        """Backward of batch ``b`` begins: it must be the forward pending."""
        if self._pending is not b:
            raise HotlineError("backward of a batch whose rows are gone: a later forward ran "
                               "first, or backward ran twice (one forward per backward)")
        self._pending = None

    def _claim_in_place(self, b) -> None:
        """Backward of in-place batch ``b`` begins: it must be the forward pending, and the
        store readies its rows for the kernel's update."""
        self._claim(b)
        self.store.update_lookups()

    def _kernel_updated(self) -> None:
        """FBGEMM's fused update of an in-place batch's rows is done: the store takes the
        batch back."""
        self.optimizer.step += 1
        self.store.scatter_lookups()

    def _pool(self, b: _Batch) -> torch.Tensor:
        """[F * B, dim] bags of ``b``."""
        bags = nn.functional.embedding_bag(b.inverse, b.rows[:, :self.dim], b.offsets, mode="sum",
                                           per_sample_weights=b.weights, include_last_offset=True)
        return bags if b.scale is None else bags * b.scale.unsqueeze(1)

    def _update(self, b: _Batch, grad: torch.Tensor) -> None:
        """Backward: the unique rows' gradients, the fused optimizer, the rows written back."""
        self._claim(b)
        if b.scale is not None:
            grad = grad * b.scale.unsqueeze(1)
        bag = torch.arange(grad.shape[0], device=grad.device).repeat_interleave(
            b.offsets.diff(), output_size=b.inverse.numel())
        g = grad.index_select(0, bag)
        if b.weights is not None:
            g = g * b.weights.unsqueeze(1)
        row_grad = torch.zeros(b.rows.shape[0], self.dim, device=grad.device).index_add_(0, b.inverse, g)
        self.store.update(b.keys, b.rows, row_grad, self.optimizer)

    def _flush(self) -> None:
        """A batch whose backward never ran: its rows go back unchanged."""
        b, self._pending = self._pending, None
        if isinstance(b, _InPlace):
            self.store.scatter_lookups()
        elif b is not None:
            self.store.scatter(b.keys, b.rows)

    # -- state_dict -----------------------------------------------------------------------
    def _state_slices(self, t=None, constants=False):
        """(name, first float, end float) of the optimizer state in a row of table ``t`` (a
        per-value part, of ``dim`` floats, narrowed to the table's dim); the optimizer's
        constants instead with ``constants``."""
        lo, out = self.dim, []
        for name, n in self.optimizer.state_parts(self.dim):
            if (name in self.optimizer.constants) == constants:
                width = self._dims[t] if t is not None and n == self.dim else n
                out.append((name, lo, lo + width))
            lo += n
        return out

    def _write(self, t: int, weight: torch.Tensor, state: dict) -> None:
        """Table ``t`` from its weights and its named state (absent state: zero)."""
        rows = torch.zeros(self._configs[t].num_embeddings, self.layout.floats)
        rows[:, :self._dims[t]] = weight
        for name, lo, hi in self._state_slices(t):
            if name in state:
                rows[:, lo:hi] = state[name]
        for name, lo, hi in self._state_slices(t, constants=True):   # only "row_dim"
            rows[:, lo:hi] = self._dims[t]
        self.store.write_table(t, rows)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """Each table's weights as TorchRec's "embedding_bags.<name>.weight" and its optimizer
        state as "embedding_bags.<name>.<state>"; "optimizer_step" with a stateful optimizer."""
        for t, c in enumerate(self._configs):
            rows = self.store.read_table(t)
            destination[f"{prefix}embedding_bags.{c.name}.weight"] = rows[:, :self._dims[t]].clone()
            for name, lo, hi in self._state_slices(t):
                destination[f"{prefix}embedding_bags.{c.name}.{name}"] = rows[:, lo:hi].clone()
        if self._state_slices():
            destination[f"{prefix}optimizer_step"] = torch.tensor(self.optimizer.step)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """Loads its own state, a TorchRec EBC's (weights; state zero) or, for one table, an
        ``nn.EmbeddingBag``'s ("weight")."""
        self._flush()
        used = set()
        for t, c in enumerate(self._configs):
            key = f"{prefix}embedding_bags.{c.name}.weight"
            if key not in state_dict and len(self._configs) == 1 and f"{prefix}weight" in state_dict:
                key = f"{prefix}weight"
            if key not in state_dict:
                missing_keys.append(key)
                continue
            shapes = {key: (c.num_embeddings, self._dims[t])}
            state = {}
            for name, lo, hi in self._state_slices(t):
                skey = f"{prefix}embedding_bags.{c.name}.{name}"
                if skey in state_dict:
                    shapes[skey] = (c.num_embeddings, hi - lo)
                    state[name] = state_dict[skey]
            for k, shape in shapes.items():
                if tuple(state_dict[k].shape) != shape:
                    raise HotlineError(f"{k}: shape {tuple(state_dict[k].shape)} given, table "
                                       f"{c.name!r} holds {shape}")
            used.update(shapes)
            self._write(t, state_dict[key].detach(), state)
        step_key = f"{prefix}optimizer_step"
        if self._state_slices():
            self.optimizer.step = int(state_dict.get(step_key, 0))
            used.add(step_key)
        if strict:
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k not in used)

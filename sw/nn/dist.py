"""The collectives of a data-parallel step (`Ranks`), for `hotline.nn`'s stores and
`hotline.train` (docs/distributed.md): every global batch is split into contiguous shards
(`Ranks.shard`), one per rank;

- embedding rows in host memory (one shared file per node) are updated once, by their owner
  rank (``row % N``), with the gradient summed over the ranks (`Ranks.owner_sum`: counts, ids
  and gradients through ``all_to_all_single``, which gloo has);
- replicated rows (the hot table, device tables) get the summed gradient of every row any rank
  touched, on every rank (`Ranks.all_sum`: an all-gather of the touched rows, or a dense
  all-reduce when that moves fewer bytes), so the replicas stay identical;
- the dense gradients are summed in one flat all-reduce (`Ranks.all_reduce_grads`).

A collective that fails (a rank died, or timed out) raises `HotlineError` with one line.
"""
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from hotline.contract.errors import HotlineError

__all__ = ["Ranks", "first_line"]


class Ranks:
    """This process's place in an initialised process group, and the collectives of a
    data-parallel step. ``bytes``: payload bytes this rank sent, by kind (dense, hot, cold);
    ``seconds``: time in collectives; ``exchanges``: how `all_sum` moved rows."""

    def __init__(self):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        # nodes of the launch: torchrun numbers the ranks node by node, LOCAL_WORLD_SIZE each
        self.local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        self.nodes = self.world // self.local
        self.node, self.local_rank = divmod(self.rank, self.local)
        self.row_space = None   # rows of the host tables, when they are split over the nodes
        self.bytes = {"dense": 0, "hot": 0, "cold": 0}
        self.exchanges = {"gather": 0, "dense": 0}   # `all_sum`'s choices
        self.seconds = 0.0

    @classmethod
    def current(cls) -> "Ranks | None":
        """The process group's ranks, or None outside a run of several ranks."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return cls()
        return None

    def shard(self, s0, s1) -> tuple[int, int]:
        """This rank's contiguous part of samples [s0, s1): the first (n % N) ranks get one
        more; a rank may get none."""
        n = s1 - s0
        q, r = divmod(n, self.world)
        a = s0 + self.rank * q + min(self.rank, r)
        return a, a + q + (self.rank < r)

    def _timed(self, call, *args, **kw):
        t0 = time.perf_counter()
        try:
            return call(*args, **kw)
        except (RuntimeError, dist.DistError) as e:
            raise HotlineError(f"rank {self.rank}: a collective failed ({first_line(e)}); "
                               f"another rank died or timed out") from None
        finally:
            self.seconds += time.perf_counter() - t0

    def barrier(self) -> None:
        self._timed(dist.barrier)

    def sum(self, values) -> np.ndarray:
        """Element-wise sum over the ranks of a float64 vector."""
        t = torch.as_tensor(np.asarray(values, np.float64))
        self._timed(dist.all_reduce, t)
        return t.numpy()

    def broadcast(self, t) -> None:
        """Rank 0's ``t`` (a CPU tensor, in place) on every rank."""
        self._timed(dist.broadcast, t, 0)

    def broadcast_params(self, module) -> None:
        """Rank 0's parameters on every rank (the same seed makes them equal already; this
        makes it a fact, as DDP does)."""
        for p in module.parameters():
            self.broadcast(p.data)

    def all_reduce_grads(self, params) -> None:
        """Sum the gradients of ``params`` over the ranks, in one flat bucket (a parameter
        with no gradient on a rank counts as zero)."""
        params = list(params)
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in params])
        self.bytes["dense"] += flat.numel() * flat.element_size()
        self._timed(dist.all_reduce, flat)
        i = 0
        for p in params:
            n = p.numel()
            p.grad = flat[i:i + n].view_as(p).clone()
            i += n

    def owner(self, ids) -> np.ndarray:
        """The rank that owns each row id: ``id % N`` on one node; over several nodes, the node
        holding the id's range of ``row_space`` (`node_rows`), then ``id % ranks per node``."""
        if self.nodes == 1:
            return ids % self.world
        return (ids * self.nodes // self.row_space) * self.local + ids % self.local

    def node_rows(self, node=None) -> tuple[int, int]:
        """The row ids [lo, hi) a node's memory holds when the tables are split over nodes."""
        k = self.node if node is None else node
        return -(-k * self.row_space // self.nodes), -(-(k + 1) * self.row_space // self.nodes)

    def node_lead(self, obj):
        """``obj`` of the first rank of this rank's node (e.g. the path of its memory file)."""
        box = [None] * self.world
        self._timed(dist.all_gather_object, box, obj)
        return box[self.node * self.local]

    def fetch(self, ids, read) -> torch.Tensor:
        """The rows ``ids`` (int64) read by their owners (``read(ids) -> [n, W]`` tensor on
        the owner), in the order of ``ids``: the host tables split over nodes. A collective:
        every rank calls it (with no ids if it needs none) and serves the others."""
        order, send_counts, recv_counts, wanted = self._to_owners(ids, ids)
        rows = read(wanted.numpy())
        back = self._all_to_all(rows.contiguous(), recv_counts, send_counts)
        self.bytes["cold"] += len(ids) * 8 + len(rows) * rows.shape[1] * rows.element_size()
        out = torch.empty_like(back)
        out[torch.from_numpy(order)] = back
        return out

    def owner_sum(self, ids, grads, first=None, where=None) -> tuple[np.ndarray, torch.Tensor]:
        """Rows ``ids`` (int64, unique) with gradients ``grads`` [U, W] from every rank, summed
        by the rows' owners (`owner` of ``where``, each id's row id; default the ids): (the
        ids this rank owns that any rank touched, sorted, their summed gradients).
        Contributions add in rank order; the columns ``first`` (a slice) are not summed but
        taken from the first rank that sent the id (values every sender has alike, such as
        the row itself)."""
        order, send_counts, recv_counts, ids_in = self._to_owners(
            ids, ids if where is None else where)
        g = grads[torch.from_numpy(order)] if len(ids) else grads
        grads_in = self._all_to_all(g.contiguous(), send_counts, recv_counts)
        self.bytes["cold"] += len(ids) * (8 + grads.shape[1] * grads.element_size())
        return sum_by_id(ids_in.numpy(), grads_in, first)

    def all_sum(self, ids, grads, kind="hot", universe=None) -> tuple[np.ndarray, torch.Tensor]:
        """Rows ``ids`` (int64, unique) with gradients ``grads`` [U, W] from every rank: (every
        id any rank touched, sorted, its gradient summed over the ranks), on every rank.
        ``kind``: what `bytes` counts it as.

        The touched rows travel by all-gather (contributions add in rank order); when ids
        are below ``universe`` and a dense all-reduce of [universe, W + 1] would move fewer
        bytes than the all-gather (a small table, or most of it touched), that instead
        (`exchanges` counts the choices)."""
        counts = self.sum(np.eye(self.world)[self.rank] * len(ids)).astype(np.int64)
        m = int(counts.max())
        row = grads.shape[1] * grads.element_size()
        if universe is not None and universe * (row + grads.element_size()) < m * (8 + row) * self.world:
            return self._dense_sum(ids, grads, universe, kind)
        if universe is not None:
            self.exchanges["gather"] += 1
        pad_ids = torch.full((m,), -1, dtype=torch.int64)
        pad_ids[:len(ids)] = torch.from_numpy(ids)
        pad_g = torch.zeros((m, grads.shape[1]), dtype=grads.dtype)
        pad_g[:len(ids)] = grads
        all_ids = [torch.empty_like(pad_ids) for _ in range(self.world)]
        all_g = [torch.empty_like(pad_g) for _ in range(self.world)]
        self._timed(dist.all_gather, all_ids, pad_ids)
        self._timed(dist.all_gather, all_g, pad_g)
        self.bytes[kind] += m * (8 + grads.shape[1] * grads.element_size())
        ids_in = np.concatenate([a[:c].numpy() for a, c in zip(all_ids, counts)])
        return sum_by_id(ids_in, torch.cat([g[:c] for g, c in zip(all_g, counts)]))

    def _dense_sum(self, ids, grads, universe, kind):
        """`all_sum` as one all-reduce of a dense [universe, W + 1] tensor (the last column
        counts who touched each id)."""
        self.exchanges["dense"] += 1
        dense = torch.zeros((universe, grads.shape[1] + 1), dtype=grads.dtype)
        idx = torch.from_numpy(ids)
        dense[idx, :-1] = grads
        dense[idx, -1] = 1
        self.bytes[kind] += dense.numel() * dense.element_size()
        self._timed(dist.all_reduce, dense)
        touched = torch.nonzero(dense[:, -1]).flatten()
        return touched.numpy(), dense[touched, :-1]

    def _to_owners(self, ids, where):
        """Send ``ids`` to the owners of ``where`` (`owner`): (this rank's order of its ids by
        owner, counts sent to and received from each rank, the ids this rank received, by
        source rank)."""
        owner = self.owner(where)
        order = np.argsort(owner, kind="stable")
        send_counts = np.bincount(owner, minlength=self.world)
        recv_counts = self._exchange_counts(send_counts)
        return (order, send_counts, recv_counts,
                self._all_to_all(torch.from_numpy(ids[order]), send_counts, recv_counts))

    def _exchange_counts(self, send_counts) -> np.ndarray:
        recv = torch.empty(self.world, dtype=torch.int64)
        self._timed(dist.all_to_all_single, recv, torch.from_numpy(send_counts.astype(np.int64)))
        return recv.numpy()

    def _all_to_all(self, t, send_counts, recv_counts) -> torch.Tensor:
        out = torch.empty((int(recv_counts.sum()), *t.shape[1:]), dtype=t.dtype)
        self._timed(dist.all_to_all_single, out, t, recv_counts.tolist(), send_counts.tolist())
        return out


def sum_by_id(ids, grads, first=None) -> tuple[np.ndarray, torch.Tensor]:
    """(sorted unique ids, gradients summed per id in input order; columns ``first`` from
    each id's first occurrence)."""
    uniq, at, inv = np.unique(ids, return_index=True, return_inverse=True)
    out = torch.zeros((len(uniq), grads.shape[1]), dtype=grads.dtype)
    out.index_add_(0, torch.from_numpy(inv.astype(np.int64)), grads)
    if first is not None:
        out[:, first] = grads[torch.from_numpy(at.astype(np.int64)), first]
    return uniq, out


def first_line(e) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]

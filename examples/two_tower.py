"""A two-tower retrieval model on MovieLens, its embeddings in a `hotline.nn.EmbeddingBagCollection`.

Written against the public API only (TorchRec's configs and KeyedJaggedTensor, Hotline's
collection and its documented `HotlineError`), as a user would write it. Run with --help.
"""
import argparse
import gzip
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchrec import EmbeddingBagConfig, KeyedJaggedTensor

from hotline.contract.errors import HotlineError
from hotline.nn import EmbeddingBagCollection

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "movielens" / "ml-100k.inter.gz"
USER_FEATURES, ITEM_FEATURES = ["user_id", "user_history"], ["item_id", "item_genres"]

EXAMPLE = """example:
  python examples/two_tower.py --placement hotline --epochs 1 --json build/two_tower.json
  python examples/two_tower.py --data synth --epochs 3      # no data needed

Each user's last rating (in time) is held out; recall@K ranks it among all items the user has
not rated in training. The user tower pools the user id and the user's last --history rated
movies (multi-hot, mean); the item tower pools the movie id and its genres (multi-hot, mean)."""


class DataError(Exception):
    """A data file that cannot be used: one line naming what is wrong."""


@dataclass
class Split:
    """Leave-last-out interactions with integer ids; ``hist[i]`` is row i's earlier items, most
    recent first (``hist_len[i]`` of them), ``genres[item]`` its genres (``genre_len``)."""
    name: str
    n_users: int
    n_items: int
    n_genres: int
    user: np.ndarray
    item: np.ndarray
    hist: np.ndarray
    hist_len: np.ndarray
    is_test: np.ndarray
    genres: np.ndarray
    genre_len: np.ndarray


# -- data ---------------------------------------------------------------------------------------

def read_atomic(path: Path, needed: list[str]) -> dict[str, list[str]]:
    """A RecBole atomic file (tab-separated, header ``name:type``) -> the ``needed`` columns."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot be read ({e})") from None
    if not lines:
        raise DataError(f"{path}: empty file")
    names = [h.split(":")[0] for h in lines[0].split("\t")]
    missing = [n for n in needed if n not in names]
    if missing:
        raise DataError(f"{path}: the header lacks {', '.join(missing)} (a RecBole atomic file "
                        f"with {', '.join(needed)} expected)")
    cols = {n: [] for n in needed}
    at = [names.index(n) for n in needed]
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(names):
            raise DataError(f"{path} line {number}: {len(fields)} fields, the header has {len(names)}")
        for n, i in zip(needed, at):
            cols[n].append(fields[i])
    if not cols[needed[0]]:
        raise DataError(f"{path}: no rows after the header")
    return cols


def load_movielens(path: Path, history: int) -> Split:
    """``.inter`` (user, item, timestamp) and, when present beside it, ``.item`` (genres)."""
    inter = read_atomic(path, ["user_id", "item_id", "timestamp"])
    try:
        stamps = np.array(inter["timestamp"], dtype=np.float64)
    except ValueError:
        raise DataError(f"{path}: a timestamp is not a number") from None
    users, user = np.unique(inter["user_id"], return_inverse=True)
    items, item = np.unique(inter["item_id"], return_inverse=True)
    genre_lists = [[] for _ in items]
    item_path = path.with_name(path.name.replace(".inter", ".item"))
    vocabulary = ["(none)"]
    if ".inter" in path.name and item_path.exists():
        meta = read_atomic(item_path, ["item_id", "class"])
        row = {token: i for i, token in enumerate(items)}
        vocabulary = sorted({g for c in meta["class"] for g in c.split()}) or vocabulary
        code = {g: i for i, g in enumerate(vocabulary)}
        for token, classes in zip(meta["item_id"], meta["class"]):
            if token in row:
                genre_lists[row[token]] = [code[g] for g in classes.split()]
    order = np.argsort(stamps, kind="stable")
    return split(path.name, len(users), user[order], item[order], genre_lists, len(vocabulary),
                 history)


def synthetic(history: int, seed: int) -> Split:
    """A tiny data set with structure to learn: each user mostly rates items of one genre."""
    rng = np.random.default_rng(seed)
    n_users, n_items, n_genres, per_user = 48, 60, 6, 16
    genre_lists = [sorted({i % n_genres, int(rng.integers(n_genres))}) for i in range(n_items)]
    by_genre = [[i for i in range(n_items) if g in genre_lists[i]] for g in range(n_genres)]
    user, item = [], []
    for u in range(n_users):
        liked = by_genre[u % n_genres]
        picks = [rng.choice(liked) if rng.random() < 0.8 else rng.integers(n_items)
                 for _ in range(per_user)]
        user += [u] * per_user
        item += [int(i) for i in picks]
    order = rng.permutation(len(user))  # interleave users in time
    return split("synth", n_users, np.array(user)[order], np.array(item)[order], genre_lists,
                 n_genres, history)


def split(name, n_users, user, item, genre_lists, n_genres, history) -> Split:
    """Interactions in time order -> each user's last one held out, earlier items as history."""
    by_user = np.lexsort((np.arange(len(user)), user))   # per user, time order kept
    u, it = user[by_user], item[by_user]
    first = np.r_[True, u[1:] != u[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(u)), 0))
    pos = np.arange(len(u)) - start
    hist = np.zeros((len(u), history), np.int64)
    for k in range(1, history + 1):
        hist[k:, k - 1] = it[:-k]   # another user's item when pos < k: beyond hist_len
    hist_len = np.minimum(pos, history)
    is_last = np.r_[u[1:] != u[:-1], True]
    back = np.argsort(by_user)   # to global time order, for the training stream
    width = max(1, max(len(g) for g in genre_lists))
    genres = np.zeros((len(genre_lists), width), np.int64)
    genre_len = np.array([len(g) for g in genre_lists], np.int64)
    for i, g in enumerate(genre_lists):
        genres[i, :len(g)] = g
    if not (is_last & (pos > 0)).any():
        raise DataError(f"{name}: no user has two ratings (nothing to hold out)")
    return Split(name, n_users, len(genre_lists), n_genres, u[back], it[back], hist[back],
                 hist_len[back], (is_last & (pos > 0))[back], genres, genre_len)


def jagged(matrix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The first ``lengths[i]`` entries of each row, rows in turn."""
    return matrix[np.arange(matrix.shape[1]) < lengths[:, None]]


def features(data: Split, rows=None, items=None) -> KeyedJaggedTensor:
    """A batch: the user side of interaction ``rows`` and/or the item side of ``items``; a side
    left out is empty bags (its tower's output is then unused)."""
    batch = len(rows) if rows is not None else len(items)
    values, lengths = [], []
    if rows is not None:
        hl = data.hist_len[rows]
        values += [data.user[rows], jagged(data.hist[rows], hl)]
        lengths += [np.ones(batch, np.int64), hl]
    else:
        lengths += [np.zeros(batch, np.int64)] * 2
    if items is not None:
        gl = data.genre_len[items]
        values += [items, jagged(data.genres[items], gl)]
        lengths += [np.ones(batch, np.int64), gl]
    else:
        lengths += [np.zeros(batch, np.int64)] * 2
    return KeyedJaggedTensor.from_lengths_sync(
        keys=USER_FEATURES + ITEM_FEATURES,
        values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
        lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int64)))


# -- the model ----------------------------------------------------------------------------------

class TwoTower(nn.Module):
    """Embeddings of both towers in one collection; each tower an MLP to a unit vector."""

    def __init__(self, ebc: EmbeddingBagCollection, dim: int, out: int = 32, hidden: int = 64):
        super().__init__()
        self.ebc = ebc

        def tower():
            return nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, out))
        self.user_tower, self.item_tower = tower().to(ebc.device), tower().to(ebc.device)

    def forward(self, kjt: KeyedJaggedTensor):
        pooled = self.ebc(kjt).to_dict()
        user = self.user_tower(torch.cat([pooled[f] for f in USER_FEATURES], 1))
        item = self.item_tower(torch.cat([pooled[f] for f in ITEM_FEATURES], 1))
        return F.normalize(user, dim=1), F.normalize(item, dim=1)


def in_batch_softmax(user, item, item_ids, temperature, log_q):
    """Each user's own item against the batch's other items (a repeat of its item is no
    negative). The batch samples negatives by popularity: each logit less the log of its item's
    sampling probability ``log_q`` (the sampling-bias correction of Yi et al., RecSys 2019)."""
    ids = torch.as_tensor(item_ids, device=user.device)
    logits = user @ item.T / temperature - log_q.to(user.device)[ids][None, :]
    repeat = (ids[:, None] == ids[None, :]) & ~torch.eye(len(ids), dtype=torch.bool, device=logits.device)
    logits = logits.masked_fill(repeat, float("-inf"))
    return F.cross_entropy(logits, torch.arange(len(ids), device=logits.device))


@torch.no_grad()
def recall_at(model, data: Split, k: int, scores=None) -> float:
    """Share of held-out items among the top ``k`` of the items the user did not rate in
    training; ``scores`` [users, items] instead of the model's (a baseline)."""
    test = np.flatnonzero(data.is_test)
    if scores is None:
        users, _ = model(features(data, rows=test))
        _, items = model(features(data, items=np.arange(data.n_items)))
        scores = (users @ items.T).cpu()
    else:
        scores = scores[data.user[test]].clone()
    train = ~data.is_test
    seen = torch.zeros(data.n_users, data.n_items, dtype=torch.bool)
    seen[data.user[train], data.item[train]] = True
    scores = scores.masked_fill(seen[data.user[test]], float("-inf"))
    top = scores.topk(min(k, data.n_items), dim=1).indices
    return float((top == torch.from_numpy(data.item[test])[:, None]).any(1).float().mean())


def item_counts(data: Split) -> torch.Tensor:
    """Each item's training ratings."""
    return torch.from_numpy(np.bincount(data.item[~data.is_test], minlength=data.n_items)).float()


def popularity_scores(data: Split) -> torch.Tensor:
    """Every user's scores by training popularity."""
    return item_counts(data).expand(data.n_users, -1)


# -- the run ------------------------------------------------------------------------------------

def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return value


def above_zero(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: must be > 0")
    return value


def parse(argv):
    p = argparse.ArgumentParser(prog="two_tower.py", description=__doc__.splitlines()[0],
                                epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA),
                   help="a RecBole .inter file (genres from the .item file beside it), or 'synth' "
                        "for a tiny built-in data set (default: ../shared/data/movielens/ml-100k.inter.gz)")
    p.add_argument("--placement", choices=["host", "device", "hotline"], default="host",
                   help="where the embedding rows live (default host)")
    p.add_argument("--device-url", default="model://",
                   help="the accelerator of the hotline placement (default model://)")
    p.add_argument("--hot-rows", type=positive,
                   help="hotline: hot rows, the exact top of the first --profile-batches (default: a tenth of all rows)")
    p.add_argument("--profile-batches", type=positive, default=8, help="hotline: default 8")
    p.add_argument("--epochs", type=positive, default=3, help="default 3")
    p.add_argument("--batch-size", type=positive, default=512, help="default 512")
    p.add_argument("--dim", type=positive, default=32, help="embedding dimension (default 32)")
    p.add_argument("--history", type=positive, default=10,
                   help="the user's last rated items in the user tower (default 10)")
    p.add_argument("--lr", type=above_zero, default=0.05, help="embedding rows, row-wise Adagrad (default 0.05)")
    p.add_argument("--dense-lr", type=above_zero, default=0.003, help="the towers' MLPs, Adam (default 0.003)")
    p.add_argument("--temperature", type=above_zero, default=0.1, help="softmax temperature (default 0.1)")
    p.add_argument("--k", type=positive, default=10, help="recall@K (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive, default=1,
                   help="torch threads (default 1: at these sizes more threads only wait on each other)")
    p.add_argument("--json", metavar="PATH", help="write the per-epoch figures and per-step losses here")
    return p.parse_args(argv)


def train(args) -> dict:
    data = (synthetic(args.history, args.seed) if args.data == "synth"
            else load_movielens(Path(args.data), args.history))
    torch.manual_seed(args.seed)
    tables = [EmbeddingBagConfig(name="users", embedding_dim=args.dim, num_embeddings=data.n_users,
                                 feature_names=["user_id"]),
              EmbeddingBagConfig(name="history", embedding_dim=args.dim, num_embeddings=data.n_items,
                                 feature_names=["user_history"], pooling="MEAN"),
              EmbeddingBagConfig(name="items", embedding_dim=args.dim, num_embeddings=data.n_items,
                                 feature_names=["item_id"]),
              EmbeddingBagConfig(name="genres", embedding_dim=args.dim, num_embeddings=data.n_genres,
                                 feature_names=["item_genres"], pooling="MEAN")]
    options = {}
    if args.placement == "hotline":
        rows = sum(t.num_embeddings for t in tables)
        options = dict(device_url=args.device_url, hot_rows=args.hot_rows or max(1, rows // 10),
                       profile_batches=args.profile_batches, batch_size=args.batch_size,
                       batch_lookups=args.batch_size * (2 + args.history + data.genres.shape[1]))
    ebc = EmbeddingBagCollection(tables, placement=args.placement, optimizer="rowwise_adagrad",
                                 lr=args.lr, **options)
    try:
        return fit(args, data, TwoTower(ebc, args.dim))
    finally:
        ebc.close()


def fit(args, data: Split, model: TwoTower) -> dict:
    dense = [p for n, p in model.named_parameters() if not n.startswith("ebc.")]
    optimizer = torch.optim.Adam(dense, lr=args.dense_lr)
    rows = np.flatnonzero(~data.is_test)
    log_q = torch.log(item_counts(data).clamp(min=1) / len(rows))
    order = torch.Generator().manual_seed(args.seed)
    print(f"{data.name}: {data.n_users} users, {data.n_items} items, {data.n_genres} genres, "
          f"{len(rows)} training ratings, {int(data.is_test.sum())} held out; placement "
          f"{args.placement}")
    baseline = recall_at(None, data, args.k, popularity_scores(data))
    epochs, losses = [], []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        perm = rows[torch.randperm(len(rows), generator=order).numpy()]
        batches = [perm[i:i + args.batch_size] for i in range(0, len(perm), args.batch_size)]
        kjt = features(data, rows=batches[0], items=data.item[batches[0]])
        first = len(losses)
        for i, batch in enumerate(batches):
            user, item = model(kjt)
            if i + 1 < len(batches):   # the next batch's rows move while this one trains
                kjt = features(data, rows=batches[i + 1], items=data.item[batches[i + 1]])
                model.ebc.prefetch(kjt)
            loss = in_batch_softmax(user, item, data.item[batch], args.temperature, log_q)
            optimizer.zero_grad()
            loss.backward()            # the embedding rows are updated here
            optimizer.step()
            losses.append(loss.item())
        recall = recall_at(model, data, args.k)
        epochs.append({"epoch": epoch, "loss": float(np.mean(losses[first:])),
                       f"recall@{args.k}": recall, "seconds": time.perf_counter() - t0})
        print(f"epoch {epoch}: loss {epochs[-1]['loss']:.4f}  recall@{args.k} {recall:.4f}  "
              f"({epochs[-1]['seconds']:.1f} s)")
    result = {"data": data.name, "placement": args.placement, "epochs": epochs,
              "step_losses": losses, f"popularity_recall@{args.k}": baseline}
    if args.placement == "hotline":
        c = model.ebc.store.counters()
        result["hot_share"], result["hot_keys"] = c["hot_share"], c["hot_keys"]
    print(f"done: recall@{args.k} {epochs[-1][f'recall@{args.k}']:.4f} (popularity "
          f"{baseline:.4f}), final loss {epochs[-1]['loss']:.4f}"
          + (f", hot share {result['hot_share']:.1%} of lookups" if "hot_share" in result else ""))
    return result


def error(message: str) -> int:
    print(f"two_tower.py: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.json) if args.json else None
    try:
        if out:   # before training: a bad path fails now, not after the run
            out.parent.mkdir(parents=True, exist_ok=True)
            if out.is_dir():
                return error(f"--json {out}: is a directory")
    except OSError as e:
        return error(f"--json {out}: {e.strerror or e}")
    try:
        result = train(args)
    except (DataError, HotlineError) as e:
        return error(str(e))
    if out:
        try:
            out.write_text(json.dumps(result, indent=1) + "\n")
        except OSError as e:
            return error(f"--json {out}: {e.strerror or e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

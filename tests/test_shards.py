"""The sharded index-stream format (`hotline.data.shards`), the fast Criteo reader
(`hotline.data.criteo_fast`) and training streamed from shards (`ShardedTrainData`)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import real_file
from hotline import cli
from hotline.data.generator import synth_criteo
from hotline.data.readers import Dataset, iter_chunks, load_dataset, real_data_files
from hotline.data.shards import ShardedDataset, write_shards
from hotline.data.spec import open_data
from hotline.train import prepare_data
from hotline.train.split import ShardedTrainData
from test_train import run

CRITEO_TEXT = [p for p in real_data_files() if p.parent.name == "criteo_kaggle"
               and not p.name.endswith(".arff.gz")]
FIELDS = ("lengths", "indices", "table_sizes", "dense", "label")


def assert_same_dataset(a, b):
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=f)


def criteo_tsv(rows, seed=0):
    """Raw Criteo TSV text with every case the readers distinguish: empty cells, upper- and
    lower-case hex, leading zeros (the same value as without), CRLF line ends."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(rows):
        cats = [("" if rng.random() < 0.1 else
                 f"{int(rng.zipf(1.3)) % 5000:0{int(rng.integers(1, 9))}x}") for _ in range(26)]
        cats[3] = cats[3].upper()
        dense = ["" if rng.random() < 0.2 else str(int(rng.integers(0, 500))) for _ in range(13)]
        lines.append("\t".join([str(int(rng.random() < 0.3)), *dense, *cats]))
    return "\r\n".join(lines) + "\r\n"


def convert(tmp_path, data, *extra):
    out = tmp_path / "shards"
    assert cli.main(["data", "convert", str(data), "--shards", str(out), *extra]) == 0
    return out


def test_convert_round_trip_generator(tmp_path):
    npz = tmp_path / "synth.npz"
    assert cli.main(["data", "synth", "--samples", "10000", "--seed", "3", "--out", str(npz)]) == 0
    out = convert(tmp_path, npz, "--shard-samples", "4096")
    index = json.loads((out / "index.json").read_text())
    assert [s["samples"] for s in index["shards"]] == [4096, 4096, 1808]
    assert index["single_hot"] and "lengths" not in index["fields"]
    assert_same_dataset(ShardedDataset(out).load(), load_dataset(npz))
    assert_same_dataset(open_data(out / "index.json", limit=5000).load(),
                        load_dataset(npz, limit=5000))


def test_convert_round_trip_multi_hot(tmp_path):
    ds = Dataset.concat([load_dataset(real_file("alimama/dmr_alimama_sampled_train500.csv.gz"))] * 10,
                        "alimama")
    out = tmp_path / "ali"
    write_shards(iter([ds.head(1234), ds.drop(1234)]), out, 4096)
    got = ShardedDataset(out)
    assert not got.single_hot and got.num_shards == 2
    assert_same_dataset(got.load(), ds)
    assert_same_dataset(got.samples(4000, 4200), ds.head(4200).drop(4000))


@pytest.mark.parametrize("path", CRITEO_TEXT, ids=lambda p: p.name)
def test_convert_round_trip_real(tmp_path, path):
    out = convert(tmp_path, path, "--shard-samples", "4096")
    assert_same_dataset(ShardedDataset(out).load(), load_dataset(path))


@pytest.mark.parametrize("path", CRITEO_TEXT, ids=lambda p: p.name)
@pytest.mark.parametrize("max_ind_range", [None, 1000])
def test_fast_reader_equals_reference_parser_on_real_files(path, max_ind_range):
    fast = list(iter_chunks(path, max_ind_range=max_ind_range, chunk_samples=700))
    ref = list(iter_chunks(path, max_ind_range=max_ind_range, chunk_samples=700, engine="legacy"))
    assert_same_dataset(Dataset.concat(fast, "f"), Dataset.concat(ref, "r"))


def test_fast_reader_equals_reference_parser_on_edge_cases(tmp_path):
    path = tmp_path / "day_0"
    path.write_text(criteo_tsv(3000))
    fast = Dataset.concat(list(iter_chunks(path, chunk_samples=999)), "f")
    ref = Dataset.concat(list(iter_chunks(path, chunk_samples=999, engine="legacy")), "r")
    assert_same_dataset(fast, ref)
    assert fast.table_sizes.max() > 100  # the vocabularies grew over several chunks


def test_fast_reader_names_the_line_of_a_late_error(tmp_path):
    """The error is past the fast reader's first block: the reference parser names the line."""
    lines = criteo_tsv(40000).split("\r\n")
    lines[38000] = lines[38000].replace("\t", "\tx", 1)
    path = tmp_path / "bad.tsv"
    path.write_text("\r\n".join(lines))
    with pytest.raises(Exception, match=r"bad.tsv:38001: field I1 = 'x.*' is not a number"):
        load_dataset(path)


@pytest.mark.parametrize("mode", ["baseline", "hotline"])
def test_training_on_shards_equals_in_memory(tmp_path, mode):
    ds = synth_criteo(5000, seed=2)
    write_shards(iter([ds]), tmp_path / "s", 4096)
    mem = prepare_data(ds, 0.1, 400)
    sharded = prepare_data(open_data(tmp_path / "s"), 0.1, 400)
    assert isinstance(sharded, ShardedTrainData)
    sharded.slice_limit = 1000  # whole-prefix reads go shard by shard
    (ra, ta), (rb, tb) = (run(d, mode, hot_rows=300, profile_fraction=0.8) for d in (mem, sharded))
    assert ra["losses"] == rb["losses"] and ra["test_auc"] == rb["test_auc"]
    assert ra["hot_lookup_fraction"] == rb["hot_lookup_fraction"]
    for x, y in zip(ta, tb):
        np.testing.assert_array_equal(x, y)
    assert mem.crc32() == sharded.crc32()


def test_a_rank_reads_only_its_shards(tmp_path):
    write_shards(iter([synth_criteo(12288, seed=1)]), tmp_path / "s", 4096)
    data = prepare_data(open_data(tmp_path / "s"), 0.0)
    read = []
    real = data.source.read_shard
    data.source.read_shard = lambda i: read.append(i) or real(i)
    data.dense[5000:6000], data.keys[data.offsets[4100]:data.offsets[8000]]
    assert read == [1]


def cli_fails(args, capsys, match):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err


def test_convert_refuses_bad_input_and_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    bad = tmp_path / "bad.tsv"
    bad.write_text(criteo_tsv(10) + "1\t2\n")
    cli_fails(["data", "convert", str(bad), "--shards", str(out)], capsys, "bad.tsv:11: 2 columns")
    cli_fails(["data", "convert", str(tmp_path / "none.csv"), "--shards", str(out)], capsys,
              "none.csv: no such file")
    npz = tmp_path / "oob.npz"
    np.savez(npz, sparse=np.array([[0, 5]]), table_sizes=np.array([3, 3]))
    cli_fails(["data", "convert", str(npz), "--shards", str(out)], capsys, "row id 5 is outside")
    cli_fails(["data", "convert", str(bad), str(bad), "--shards", str(out)], capsys,
              "several inputs need --max-ind-range")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv", "oob.npz"]


@pytest.mark.parametrize("damage, match", [
    (lambda d: (d / "shard-00001.dense.npy").unlink(), "shard-00001.dense.npy: shard file missing"),
    (lambda d: d.joinpath("shard-00000.indices.npy").write_bytes(
        d.joinpath("shard-00000.indices.npy").read_bytes()[:-8] + b"\0" * 8), "corrupt shard"),
    (lambda d: d.joinpath("shard-00000.label.npy").write_bytes(b"junk"), "not a readable .npy"),
    (lambda d: d.joinpath("index.json").write_text(
        d.joinpath("index.json").read_text().replace('"samples": 4096', '"samples": 4000', 1)),
     "does not match its fingerprint"),
])
def test_train_refuses_a_damaged_shard_directory(tmp_path, capsys, damage, match):
    out = tmp_path / "s"
    write_shards(iter([synth_criteo(6000, seed=1)]), out, 4096)
    damage(out)
    cli_fails(["train", str(out), "--mode", "baseline", "--max-ind-range", "100", "--dim", "4", "--batch-size", "512",
               "--json", str(tmp_path / "r.json")], capsys, match)
    assert not (tmp_path / "r.json").exists()


class _Unreadable:
    def __array__(self, *args, **kwargs):
        raise MemoryError("the whole key stream was read")


def test_checkpoint_fingerprint_streams_shards_and_matches_in_memory(tmp_path):
    """The resume check's data fingerprint reads shards one at a time (never the whole key
    stream) and equals the in-memory data's, so checkpoints move between the two."""
    from hotline.train.checkpoint import data_fingerprint
    ds = synth_criteo(5000, seed=1)
    write_shards(iter([ds]), tmp_path / "s", 4096)
    sharded = prepare_data(ShardedDataset(tmp_path / "s"), 0.1, 100)
    want = data_fingerprint(prepare_data(ds, 0.1, 100))
    sharded.keys = _Unreadable()
    got = data_fingerprint(sharded)
    assert {k: v for k, v in got.items() if k != "name"} == {
        k: v for k, v in want.items() if k != "name"}


def peak_rss(tmp_path, data, *extra):
    """peak_rss_bytes of a `hotline train` run. Linux keeps ru_maxrss across fork and exec,
    so the run is forked by a small shell (not exec'd by it), or it would report this
    process's peak."""
    out = tmp_path / "r.json"
    subprocess.run(["sh", "-c", '"$@"; exit $?', "sh", Path(sys.executable).parent / "hotline", "train", str(data), "--mode", "baseline",
                    "--max-ind-range", "1000", "--dim", "8", "--batch-size", "1024",
                    "--threads", "1", "--json", str(out), *extra], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())["peak_rss_bytes"]


DATA_BUDGET = 32 << 20   # shards in flight, their preparation and evaluation's buffers


@pytest.mark.slow
def test_training_memory_is_bounded_by_shards_not_data(tmp_path):
    """800k samples (124 MB of shards, ~4x the budget): the run's peak RSS stays within that
    of a one-shard run of the same tables and model plus the budget (measured: +26 MB, the
    same from 50k samples to 400k)."""
    out = tmp_path / "big"
    assert cli.main(["data", "convert", "synth:criteo-kaggle:800000", "--shards", str(out),
                     "--shard-samples", "16384"]) == 0
    size = sum(f.stat().st_size for f in out.iterdir())
    assert size > 3.5 * DATA_BUDGET
    one_shard = peak_rss(tmp_path, out, "--max-samples", "16384")
    whole = peak_rss(tmp_path, out)
    assert whole - one_shard < DATA_BUDGET, (whole, one_shard)

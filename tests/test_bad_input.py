"""Bad data input through the real CLI (issue 42): one line naming the file, line and field,
exit 2, no traceback, no output; ``--max-ind-range`` folds every kind of input; the fast and
the reference Criteo parsers agree on every error, line numbers included."""
import gzip
import json

import numpy as np
import pytest

from helpers import real_file
from hotline.contract.errors import HotlineError
from hotline.data.generator import CRITEO_KAGGLE_CARDINALITIES, synth_criteo
from hotline.data.readers import iter_chunks
from test_cli import run
from test_data import criteo_csv

SYNTH_FORM = "synth:LIKE:SAMPLES[:SEED][:drift=RATE]"
CRITEO_HEADER = "header Id,Label,I1..I13,C1..C26"


def assert_one_line_error(r, message, *outputs):
    """Exit 2, exactly ``hotline: error: MESSAGE`` on stderr, nothing on stdout, no output."""
    assert (r.returncode, r.stderr, r.stdout) == (2, f"hotline: error: {message}\n", ""), r.stderr
    for out in outputs:
        assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))


# --- data calibrate: anything but a well-formed Criteo Kaggle CSV ---------------------------

def _truncated_gz(path):
    data = gzip.compress(criteo_csv(*[{} for _ in range(300)]).encode())
    path.write_bytes(data[:len(data) // 2])


def _npz(path):
    np.savez(path, sparse=np.zeros((3, 2), np.int64), table_sizes=np.array([1, 1]))


CALIBRATE_CASES = {
    "npz": ("x.npz", _npz, f": detected as npz; calibrate needs a Criteo Kaggle CSV "
                           f"({CRITEO_HEADER})"),
    "binary": ("x.csv", lambda p: p.write_bytes(b"\x01\xff" * 64), ": unreadable "
               "(UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 1: "
               "invalid start byte)"),
    "ragged": ("x.csv", criteo_csv({}, "2,0,4"), ":3: 3 columns, expected 41"),
    "header only": ("x.csv", criteo_csv(), ": no samples"),
    "empty": ("x.csv", "", ": empty file"),
    "truncated": ("x.csv.gz", _truncated_gz, ": unreadable (EOFError: Compressed file ended "
                                             "before the end-of-stream marker was reached)"),
    "nan dense": ("x.csv", criteo_csv({}, {"I4": "nan"}), ":3: field I4 = 'nan' is not a "
                                                         "finite number"),
    "user-items": ("x.txt", "7 1 2\n8 3\n", f": detected as user-items; calibrate needs a "
                                            f"Criteo Kaggle CSV ({CRITEO_HEADER})"),
}


@pytest.mark.parametrize("case", CALIBRATE_CASES)
def test_calibrate_refuses_what_is_not_a_criteo_csv(tmp_path, case):
    name, content, message = CALIBRATE_CASES[case]
    path = tmp_path / name
    content(path) if callable(content) else path.write_text(content)
    out = tmp_path / "cal.json"
    assert_one_line_error(run("data", "calibrate", path, "--json", out), f"{path}{message}", out)


def test_calibrate_refuses_the_real_movielens_file(tmp_path):
    path = real_file("movielens/ml-100k.inter.gz")
    out = tmp_path / "cal.json"
    assert_one_line_error(run("data", "calibrate", path, "--json", out),
                          f"{path}: detected as recbole; calibrate needs a Criteo Kaggle CSV "
                          f"({CRITEO_HEADER})", out)


# --- labels and dense values: the line and the field ---------------------------------------

BAD_ROWS = {
    "empty label": ({"Label": ""}, "field Label is missing (a label is 0 or 1)"),
    "label 2": ({"Label": "2"}, "field Label = '2' is not a label (0 or 1)"),
    "label nan": ({"Label": "nan"}, "field Label = 'nan' is not a finite number"),
    "nan dense": ({"I1": "nan"}, "field I1 = 'nan' is not a finite number"),
    "inf dense": ({"I13": "inf"}, "field I13 = 'inf' is not a finite number"),
    "-inf dense": ({"I2": "-inf"}, "field I2 = '-inf' is not a finite number"),
    "dense beyond float32": ({"I7": "1e39"}, "field I7 = '1e39' is not a finite number"),
}


def _bad_csv(path, row, at, blank_after=()):
    """A Criteo CSV of ``at + 3`` rows, row ``at`` (Id ``at``) overridden by ``row``, a blank
    line after each row in ``blank_after``; returns the file line number of the bad row."""
    lines = criteo_csv(*[row if i == at else {} for i in range(1, at + 4)]).splitlines()
    for i in sorted(blank_after, reverse=True):
        lines.insert(i + 1, "")  # line 1 is the header: row i is lines[i]
    path.write_text("\n".join(lines) + "\n")
    return next(n for n, l in enumerate(path.read_text().split("\n"), 1)
                if l.startswith(f"{at},"))


@pytest.mark.parametrize("case", BAD_ROWS)
def test_stats_names_the_line_and_field_of_a_bad_label_or_dense_value(tmp_path, case):
    row, message = BAD_ROWS[case]
    path = tmp_path / "bad.csv"
    line = _bad_csv(path, row, 2, blank_after=(1,))
    assert line == 4  # header, row 1, a blank line, row 2
    out = tmp_path / "s.json"
    assert_one_line_error(run("data", "stats", path, "--json", out), f"{path}:4: {message}", out)


def test_train_refuses_empty_labels_with_the_line(tmp_path):
    """They were trained as label 0 without a word."""
    path = tmp_path / "nolabel.csv"
    path.write_text(criteo_csv(*[{} for _ in range(40)], {"Label": ""}))
    out = tmp_path / "t.json"
    assert_one_line_error(run("train", path, "--mode", "baseline", "--batch-size", "8",
                              "--json", out),
                          f"{path}:42: field Label is missing (a label is 0 or 1)", out)


def test_raw_tsv_names_the_criteo_fields(tmp_path):
    row = ["1", *["3"] * 13, *["ab"] * 26]
    path = tmp_path / "day_0"
    path.write_text("\t".join(row) + "\n" + "\t".join([""] + row[1:]) + "\n")
    assert_one_line_error(run("data", "stats", path),
                          f"{path}:2: field Label is missing (a label is 0 or 1)")


@pytest.mark.parametrize("case", BAD_ROWS)
def test_fast_and_reference_parsers_agree_on_the_error(tmp_path, case):
    """The bad row lies in the third chunk and after blank lines: the fast reader has yielded
    samples before it refuses, and the reference parser must count the blank lines."""
    row, message = BAD_ROWS[case]
    path = tmp_path / "bad.csv"
    line = _bad_csv(path, row, 2500, blank_after=(7, 1200, 2499))
    assert line == 2504
    errors = []
    for engine in ("fast", "legacy"):
        with pytest.raises(HotlineError) as e:
            for _ in iter_chunks(path, chunk_samples=1000, engine=engine):
                pass
        errors.append(str(e.value))
    assert errors == [f"{path}:{line}: {message}"] * 2


# --- --max-ind-range folds every kind of input ----------------------------------------------

M = 1000
SYNTH = synth_criteo(3000, 0)
FOLDED_SIZES = [min(c, M) for c in CRITEO_KAGGLE_CARDINALITIES]


def test_convert_folds_the_generator_into_shards_that_train_takes(tmp_path):
    """The README's convert-then-train pattern: the shards hold row ids modulo M (the train
    on them built the generator's 33.8M rows)."""
    shards = tmp_path / "shards"
    r = run("data", "convert", "synth:criteo-kaggle:3000", "--max-ind-range", M,
            "--shards", shards)
    assert r.returncode == 0, r.stderr
    index = json.loads((shards / "index.json").read_text())
    assert index["table_sizes"] == FOLDED_SIZES
    np.testing.assert_array_equal(np.load(shards / "shard-00000.indices.npy"),
                                  SYNTH.indices % M)
    out = tmp_path / "t.json"
    r = run("train", shards, "--mode", "baseline", "--batch-size", "512", "--max-steps", "1",
            "--json", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["table_rows"] == sum(FOLDED_SIZES)


def test_convert_folds_the_generator_and_an_npz_into_npz(tmp_path):
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    assert run("data", "convert", "synth:criteo-kaggle:3000", "--max-ind-range", M,
               "--out", first).returncode == 0
    assert run("data", "convert", first, "--max-ind-range", 7, "--out", second).returncode == 0
    for path, m, rows in ((first, M, SYNTH.indices % M), (second, 7, SYNTH.indices % M % 7)):
        z = np.load(path)
        assert z["table_sizes"].tolist() == [min(c, m) for c in CRITEO_KAGGLE_CARDINALITIES]
        np.testing.assert_array_equal(z["sparse"].ravel(), rows)


def _stats(tmp_path, data, m):
    out = tmp_path / "stats.json"
    r = run("data", "stats", data, "--max-ind-range", m, "--json", out)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())["tables"]


def test_stats_folds_the_generator_and_shards(tmp_path):
    tables = _stats(tmp_path, "synth:criteo-kaggle:3000", M)
    sparse = SYNTH.indices.reshape(3000, -1) % M
    assert [t["rows"] for t in tables] == FOLDED_SIZES
    assert [t["distinct"] for t in tables] == [len(np.unique(c)) for c in sparse.T]
    shards = tmp_path / "shards"
    assert run("data", "convert", "synth:criteo-kaggle:3000", "--shards", shards).returncode == 0
    tables = _stats(tmp_path, shards, 100)
    assert [t["rows"] for t in tables] == [min(c, 100) for c in CRITEO_KAGGLE_CARDINALITIES]
    assert [t["distinct"] for t in tables] == [len(np.unique(c % 100)) for c in sparse.T]


def test_stats_folds_user_item_lists(tmp_path):
    """Row ids (first appearance) modulo M for the formats without hex values."""
    path = tmp_path / "lists.txt"
    path.write_text("10 1 2\n11 3\n12 1\n13 4 5\n")  # users 0..3, items 0..4
    tables = _stats(tmp_path, path, 3)
    assert [(t["rows"], t["lookups"], t["distinct"]) for t in tables] == [(3, 6, 3), (3, 6, 3)]


def test_stats_folds_the_real_movielens_file(tmp_path):
    path = real_file("movielens/ml-100k.inter.gz")
    tables = _stats(tmp_path, path, 50)
    assert [(t["rows"], t["lookups"]) for t in tables] == [(50, 100_000), (50, 100_000)]


# --- synth: specs speak of the spec --------------------------------------------------------

@pytest.mark.parametrize("spec,message", [
    ("synth:criteo-kaggle:0", f"SAMPLES must be positive, not 0 ({SYNTH_FORM})"),
    ("synth:criteo-kaggle:-5", f"SAMPLES must be positive, not -5 ({SYNTH_FORM})"),
    ("synth:criteo:2000", f"LIKE 'criteo' is not known (choose from criteo-kaggle; {SYNTH_FORM})"),
    ("synth:criteo-kaggle:10:-1", f"SEED must be 0 or more, not -1 ({SYNTH_FORM})"),
])
def test_a_bad_synth_spec_names_the_spec(spec, message):
    """Not the options of other commands (--samples, --like)."""
    assert_one_line_error(run("data", "stats", spec), f"{spec}: {message}")


@pytest.mark.parametrize("command,argv", [
    ("data synth", ["data", "synth", "--samples", "5", "--out", "x.npz"]),
    ("sim", ["sim", "--backend", "model"]),
    ("train", ["train", "synth:criteo-kaggle:300", "--mode", "baseline", "--batch-size", "64",
               "--json", "t.json"]),
])
def test_a_negative_seed_is_a_usage_error(command, argv):
    """It was numpy's traceback ("expected non-negative integer")."""
    r = run(*argv, "--seed", "-1")
    assert_one_line_error(r, f"{command}: argument --seed: must be 0 or more, not -1 (see "
                             f"'hotline {command} --help')")


@pytest.mark.parametrize("action", ["stats", "calibrate"])
def test_data_help_has_an_example(action):
    r = run("data", action, "--help")
    assert r.returncode == 0
    example = r.stdout.partition("example")[2]
    assert f"\n  hotline data {action} ../shared/data/criteo_kaggle/" in example

"""Readers against the real files (figures from ../shared/data/SOURCES.md) and a naive parser."""
import gzip

import numpy as np
import pytest

from helpers import CRITEO_CSV, real_file
from hotline.contract.keys import MAX_ROWS, make_keys, split_keys
from hotline.data.readers import CRITEO_CSV_COLUMNS, Dataset, detect_format, iter_chunks, \
    load_dataset
from hotline.contract.errors import HotlineError
from hotline.data import open_data
import reference

# (file, samples, features, lookups excluding empty cells, distinct keys excluding empty cells)
SOURCES_FIGURES = [
    ("criteo_kaggle/train_random4584.csv.gz", 4584, 26, 106_115, 26_288),
    ("criteo_kaggle/train_head1999.csv.gz", 1999, 26, 45_836, 13_079),
    ("criteo_kaggle/test_head1999.csv.gz", 1999, 26, 45_945, 13_048),
    ("criteo_kaggle/train_rows0-206k_sub1pct.csv.gz", 1999, 26, 46_264, 14_158),
    ("criteo_kaggle/train_rows39.80M-39.99M_sub1pct.csv.gz", 1999, 26, 45_950, 13_851),
    ("criteo_kaggle/train_random45840_7cat.arff.gz", 45_840, 7, 260_284, 76),
    ("movielens/ml-100k.inter.gz", 100_000, 2, 200_000, 2_625),
    ("alimama/dmr_alimama_sampled_train500.csv.gz", 500, 18, 82_137, 5_762),
    ("amazon_book/ngcf_test.txt.gz", 603_378, 2, 1_206_756, 135_268),
]


def _empty_keys(path, ds):
    """Keys that stand for an empty cell: the row the reader gave to '' (or '?') per table."""
    fmt = detect_format(path)
    if fmt not in ("criteo-csv", "arff"):
        return np.zeros(0, np.uint32)
    missing = "?" if fmt == "arff" else ""
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    if fmt == "arff":
        names = [l.split()[1] for l in lines if l.lower().startswith("@attribute")]
        body = lines[next(i for i, l in enumerate(lines) if l.lower().startswith("@data")) + 1:]
    else:
        names, body = lines[0].split(","), lines[1:]
    cats = [i for i, c in enumerate(names) if c.startswith("C")]
    sparse = ds.indices.reshape(ds.lengths.shape)
    out = []
    for t, j in enumerate(cats):
        rows = [n for n, l in enumerate(body) if l.split(",")[j] == missing]
        if rows:
            out.append(int(make_keys([t], [sparse[rows[0], t]])[0]))
    return np.array(out, np.uint32)


@pytest.mark.parametrize("rel,samples,features,lookups,distinct", SOURCES_FIGURES)
def test_real_file_matches_published_figures(rel, samples, features, lookups, distinct):
    path = real_file(rel)
    ds = load_dataset(path)
    assert (ds.num_samples, ds.num_features) == (samples, features)
    keys = ds.keys
    empty = np.isin(keys, _empty_keys(path, ds))
    assert int((~empty).sum()) == lookups
    assert len(np.unique(keys[~empty])) == distinct
    assert np.all(ds.indices < ds.table_sizes[ds.tables])


@pytest.mark.parametrize("rel", CRITEO_CSV)
def test_criteo_keys_match_naive_csv_parser(rel):
    path = real_file(rel)
    expected = np.array(reference.read_criteo_csv(path), np.uint32).ravel()
    ds = load_dataset(path, chunk_samples=500)  # several chunks: vocabularies carry over
    np.testing.assert_array_equal(ds.keys, expected)


def test_chunked_reading_is_chunk_size_independent():
    path = real_file("alimama/dmr_alimama_sampled_train500.csv.gz")
    a, b = load_dataset(path), load_dataset(path, chunk_samples=37)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert sum(c.num_samples for c in iter_chunks(path, chunk_samples=64)) == 500


def test_alimama_multi_hot_layout():
    ds = load_dataset(real_file("alimama/dmr_alimama_sampled_train500.csv.gz"))
    assert not ds.single_hot
    assert ds.lengths[:, :3].max() <= 50 and np.all(ds.lengths[:, 3:] == 1)
    assert set(np.unique(ds.label)) <= {0.0, 1.0}


def test_max_ind_range_hashes_like_dlrm():
    path = real_file("criteo_kaggle/train_head1999.csv.gz")
    ds = load_dataset(path, max_ind_range=1000)
    assert np.all(ds.table_sizes == 1000)
    with gzip.open(path, "rt") as f:
        header, first = f.readline().strip().split(","), f.readline().strip().split(",")
    c1 = first[header.index("C1")]
    assert ds.indices[0] == int(c1, 16) % 1000


def test_criteo_tsv_and_csv_agree(tmp_path):
    src = real_file("criteo_kaggle/train_head1999.csv.gz")
    with gzip.open(src, "rt") as f:
        lines = f.read().splitlines()[1:]
    tsv = tmp_path / "day_0"
    tsv.write_text("\n".join("\t".join(l.split(",")[1:]) for l in lines) + "\n")
    a, b = load_dataset(src), load_dataset(tsv)
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_array_equal(a.dense, b.dense)
    np.testing.assert_array_equal(a.label, b.label)


def test_npz_round_trip(tmp_path):
    ds = load_dataset(real_file("alimama/dmr_alimama_sampled_train500.csv.gz"))
    ds.save(tmp_path / "a.npz")
    back = load_dataset(tmp_path / "a.npz")
    np.testing.assert_array_equal(back.keys, ds.keys)
    np.testing.assert_array_equal(back.lengths, ds.lengths)


def test_keys_round_trip():
    t, r = np.array([0, 5, 31]), np.array([0, 123, MAX_ROWS - 1])
    tt, rr = split_keys(make_keys(t, r))
    np.testing.assert_array_equal(tt, t)
    np.testing.assert_array_equal(rr, r)


def test_user_item_lists(tmp_path):
    p = tmp_path / "lists.txt"
    p.write_text("7 1 2\n8\n9 2\n")
    ds = load_dataset(p)
    assert ds.num_samples == 3
    assert ds.indices.reshape(3, 2).tolist() == [[0, 0], [0, 1], [1, 1]]


def criteo_csv(*rows, columns=CRITEO_CSV_COLUMNS):
    """CSV text: the header ``columns``, then one line per dict of field overrides (Id from 1,
    Label 0, I* 3, C* 'abc'), or per string taken as the line itself."""
    default = lambda c, i: str(i) if c == "Id" else "0" if c == "Label" else \
        "3" if c.startswith("I") else "abc"
    lines = [",".join(columns)]
    for i, r in enumerate(rows, 1):
        lines.append(r if isinstance(r, str) else
                     ",".join(r.get(c, default(c, i)) for c in columns))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("content,fragment", [
    (criteo_csv({}, "2,0,4"), ":3: 3 columns, expected 41"),
    (criteo_csv({}, {"C1": "xyz!"}), ":3: field C1 = 'xyz!' is not a hex"),
    (criteo_csv({}, {"I1": "four"}), ":3: field I1 = 'four' is not a number"),
    ("", "empty file"),
])
def test_bad_text_input_names_line_and_field(tmp_path, content, fragment):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(HotlineError, match=fragment.replace("(", r"\(").replace("?", r"\?")):
        load_dataset(p)


def without(*names):
    return tuple(c for c in CRITEO_CSV_COLUMNS if c not in names)


@pytest.mark.parametrize("columns,fragment", [
    (without("C26"), "lacks C26 "),
    (without("I5"), "lacks I5 "),
    (without("Id"), "lacks Id "),
    (without("Id", "Label", "C1"), "lacks Id, C1 "),
    (CRITEO_CSV_COLUMNS + ("C27",), "has unknown column 'C27'"),
    (CRITEO_CSV_COLUMNS + ("I5",), "repeats I5"),
])
def test_criteo_csv_header_without_a_standard_column_is_refused(tmp_path, columns, fragment):
    """A header missing C26 used to train 25 tables without a word: every column is required
    (Label may be absent, as in test files), none unknown or repeated."""
    p = tmp_path / "part.csv"
    p.write_text(criteo_csv({}, {}, columns=columns))
    with pytest.raises(HotlineError) as e:
        load_dataset(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:1: the Criteo CSV header ") and fragment in msg
    assert "\n" not in msg


def test_criteo_csv_columns_by_name_label_optional(tmp_path):
    full = tmp_path / "full.csv"
    full.write_text(criteo_csv({"C26": "ff", "I5": "7"}, {"Label": "1"}))
    a = load_dataset(full)
    assert a.num_features == 26 and a.dense.shape == (2, 13) and a.label.tolist() == [0, 1]
    # a test file: no Label column, columns in another order
    cols = tuple(reversed(without("Label")))
    test = tmp_path / "test.csv"
    test.write_text(criteo_csv({"C26": "ff", "I5": "7"}, {}, columns=cols))
    b = load_dataset(test)
    assert b.label is None and b.num_features == 26
    np.testing.assert_array_equal(b.dense, a.dense)
    np.testing.assert_array_equal(b.indices, a.indices)


def test_train_refuses_a_partial_criteo_header_one_line_exit_2(tmp_path, capsys):
    from hotline import cli
    p = tmp_path / "part.csv"
    p.write_text(criteo_csv(*[{} for _ in range(20)], columns=without("C26")))
    out = tmp_path / "t.json"
    rc = cli.main(["train", str(p), "--mode", "baseline", "--batch-size", "4", "--json", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert err == [f"hotline: error: {p}:1: the Criteo CSV header lacks C26 (expected "
                   f"Id,Label,I1..I13,C1..C26; Label may be absent)"]


@pytest.mark.parametrize("arrays,fragment", [
    ({"sparse": np.array([[0, 5]]), "table_sizes": np.array([4, 5])}, "row id 5 is outside table 1"),
    ({"sparse": np.array([[-1, 0]]), "table_sizes": np.array([4, 5])}, "row id -1 is outside table 0"),
    ({"sparse": np.array([[0, 0]])}, "missing field 'table_sizes'"),
    ({"table_sizes": np.array([4])}, "needs field 'sparse'"),
    ({"sparse": np.zeros((1, 33), np.int64), "table_sizes": np.ones(33, np.int64)}, "33 sparse features"),
    ({"sparse": np.array([[0]]), "table_sizes": np.array([1 << 28])}, "more than 2\\^27"),
    ({"indices": np.array([0, 1]), "lengths": np.array([[1]]), "table_sizes": np.array([4])}, "sum\\(lengths\\)"),
])
def test_bad_npz_names_field(tmp_path, arrays, fragment):
    p = tmp_path / "bad.npz"
    np.savez(p, **arrays)
    with pytest.raises(HotlineError, match=fragment):
        load_dataset(p)


def test_missing_file():
    with pytest.raises(HotlineError, match="no such file"):
        load_dataset("/nonexistent/file.csv")


def test_dataset_head_and_offsets():
    ds = Dataset(np.array([[1, 2], [0, 1], [3, 0]], np.int32), np.arange(7), np.array([10, 10]))
    np.testing.assert_array_equal(ds.sample_offsets, [0, 3, 4, 7])
    assert ds.tables.tolist() == [0, 1, 1, 1, 0, 0, 0]
    assert ds.head(2).num_lookups == 4


def test_dense_rows_keeps_the_access_pattern_and_shrinks_the_tables():
    ds = open_data("synth:criteo-kaggle:300:4")
    dense = ds.dense_rows()
    assert np.array_equal(dense.lengths, ds.lengths)
    for t in range(ds.num_features):
        rows = ds.indices[ds.tables == t]
        # the same order of first appearances and repeats, rows 0 .. distinct - 1 in row order
        assert np.array_equal(dense.indices[ds.tables == t], np.searchsorted(np.unique(rows), rows))
        assert dense.table_sizes[t] == len(np.unique(rows))
    assert dense.table_sizes.sum() < ds.table_sizes.sum()
    dense.validate()

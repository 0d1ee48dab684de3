import pytest

from hotline.data import shared_data_dir

DATA = shared_data_dir()


def real_file(rel):
    """Path of a file under ../shared/data, or skip the test when it is absent."""
    p = DATA / rel
    if not p.exists():
        pytest.skip(f"real data not present: {p}")
    return p


CRITEO_CSV = [
    "criteo_kaggle/train_random4584.csv.gz",
    "criteo_kaggle/train_head1999.csv.gz",
    "criteo_kaggle/test_head1999.csv.gz",
    "criteo_kaggle/train_rows0-206k_sub1pct.csv.gz",
    "criteo_kaggle/train_rows39.80M-39.99M_sub1pct.csv.gz",
]
ALL_REAL = CRITEO_CSV + [
    "criteo_kaggle/train_random45840_7cat.arff.gz",
    "movielens/ml-100k.inter.gz",
    "alimama/dmr_alimama_sampled_train500.csv.gz",
    "amazon_book/ngcf_test.txt.gz",
]


def simulator_or_skip(name):
    """``name`` if that HDL simulator can run here, else skip the test."""
    from hotline.host.simulators import simulator_available
    if not simulator_available(name):
        pytest.skip(f"{name} is not installed")
    return name

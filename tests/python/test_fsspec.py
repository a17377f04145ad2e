"""The ckptfs:// fsspec file system: entry-point registration, fsspec.open, listing,
and round trips of numpy and pandas (parquet through pyarrow) data."""

import fsspec
import numpy as np
import pandas as pd
import pytest

import ckptfs
from ckptfs.fsspec import CkptFileSystem


@pytest.fixture
def env_store(store, monkeypatch):
    """The test store as the default store of ckptfs:/// URLs."""
    monkeypatch.setenv("CKPTFS_STORE", store.name)
    return store


def test_protocol_is_registered_through_the_entry_point():
    assert fsspec.get_filesystem_class("ckptfs") is CkptFileSystem


def test_fsspec_open_writes_into_the_default_store(env_store):
    with fsspec.open("ckptfs:///run1/x.bin", "wb") as f:
        f.write(b"payload")
    assert env_store.read_bytes("/run1/x.bin") == b"payload"
    with fsspec.open("ckptfs:///run1/x.bin", "rb") as f:
        assert f.read() == b"payload"
    with fsspec.open("ckptfs:///run1/t.txt", "w") as f:
        f.write("text")
    with fsspec.open("ckptfs:///run1/t.txt", "r") as f:
        assert f.read() == "text"


def test_store_name_in_the_url_host(store):
    with fsspec.open(f"ckptfs://{store.name}/a/b.bin", "wb") as f:
        f.write(b"xyz")
    assert store.read_bytes("/a/b.bin") == b"xyz"


def test_listing_info_rm_mv_cat(store):
    fs = CkptFileSystem(store=store)
    fs.pipe_file("/d/one", b"1")
    fs.pipe_file("/d/two", b"22")
    assert sorted(fs.ls("/d", detail=False)) == ["/d/one", "/d/two"]
    assert fs.info("/d/two")["size"] == 2 and fs.info("/d")["type"] == "directory"
    assert fs.cat_file("/d/two") == b"22" and fs.cat_file("/d/two", start=1) == b"2"
    fs.mv("/d/one", "/d/uno")
    assert fs.exists("/d/uno") and not fs.exists("/d/one")
    assert sorted(fs.find("/")) == ["/d/two", "/d/uno"]
    fs.rm("/d", recursive=True)
    assert not fs.exists("/d")
    with pytest.raises(FileNotFoundError):
        fs.info("/d")


def test_numpy_round_trip(env_store):
    a = np.random.default_rng(1).standard_normal((64, 33)).astype(np.float32)
    with fsspec.open("ckptfs:///np/a.npy", "wb") as f:
        np.save(f, a)
    with fsspec.open("ckptfs:///np/a.npy", "rb") as f:
        b = np.load(f)
    assert b.dtype == a.dtype and np.array_equal(a, b)


def test_pandas_parquet_and_csv_round_trip(env_store):
    df = pd.DataFrame({"step": np.arange(100), "loss": np.linspace(1, 0, 100), "tag": ["a", "b"] * 50})
    df.to_parquet("ckptfs:///pd/metrics.parquet")
    back = pd.read_parquet("ckptfs:///pd/metrics.parquet")
    pd.testing.assert_frame_equal(df, back)
    df.to_csv("ckptfs:///pd/metrics.csv", index=False)
    pd.testing.assert_frame_equal(df, pd.read_csv("ckptfs:///pd/metrics.csv"))
    assert env_store.stat("/pd/metrics.parquet").state == "complete"


def test_pyarrow_dataset_through_fsspec(store):
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs = CkptFileSystem(store=store)
    t = pa.table({"x": list(range(1000)), "y": [float(i) / 3 for i in range(1000)]})
    pq.write_table(t, "/pa/t.parquet", filesystem=fs)
    assert pq.read_table("/pa/t.parquet", filesystem=fs).equals(t)


def test_missing_file_is_file_not_found(env_store):
    with pytest.raises(FileNotFoundError):
        with fsspec.open("ckptfs:///nope/x", "rb") as f:
            f.read()

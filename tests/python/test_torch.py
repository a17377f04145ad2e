"""ckptfs.torch in one process: DCP save/load through the store, completeness rule,
latest-checkpoint search, torch.save-compatible helpers."""

import io
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402

warnings.filterwarnings("ignore", message="torch.distributed is disabled")


def _state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 32, generator=g), "b": torch.randn(32, generator=g), "step": torch.tensor(seed)}


def test_dcp_save_then_load_gives_identical_tensors(store):
    src = _state(1)
    dcp.save(src, storage_writer=ct.Writer(store=store, path="/run/step1"))
    names = store.listdir("/run/step1")
    assert ".metadata" in names and any(n.endswith(".distcp") for n in names)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    dcp.load(dst, storage_reader=ct.Reader(store=store, path="/run/step1"))
    for k in src:
        assert torch.equal(src[k], dst[k]), k


def test_checkpoint_id_url_overrides_the_writer_path(store):
    dcp.save(_state(2), checkpoint_id="ckptfs:///run/by-id", storage_writer=ct.Writer(store=store))
    assert ct.is_complete("/run/by-id", store)


def test_reader_without_path_loads_the_latest_complete_checkpoint(store):
    dcp.save(_state(1), storage_writer=ct.Writer(store=store, path="/run/s1"))
    dcp.save(_state(2), storage_writer=ct.Writer(store=store, path="/run/s2"))
    # s3: shards written but the metadata never renamed in (a crash before finish)
    dcp.save(_state(3), storage_writer=ct.Writer(store=store, path="/run/s3"))
    store.rename("/run/s3/.metadata", "/run/s3/.metadata.tmp")
    assert not ct.is_complete("/run/s3", store)
    assert ct.latest_checkpoint("/run", store) == "/run/s2"
    r = ct.Reader(store=store, root="/run")
    assert r.path == "/run/s2"
    dst = {k: torch.zeros_like(v) for k, v in _state(0).items()}
    dcp.load(dst, storage_reader=r)
    assert torch.equal(dst["w"], _state(2)["w"]) and int(dst["step"]) == 2


def test_a_save_missing_a_ranks_part_is_not_chosen(store):
    dcp.save(_state(1), storage_writer=ct.Writer(store=store, path="/run/a"))
    # b expects 2 ranks in this store; only rank 0 writes: its dataset stays open
    w = ct.Writer(store=store, path="/run/b", dataset_world=2)
    dcp.save(_state(2), storage_writer=w)
    assert w.dataset["state"] == "open" and list(w.dataset["parts"]) == ["0"]
    assert not ct.is_complete("/run/b", store)
    assert ct.latest_checkpoint("/run", store) == "/run/a"
    assert ct.Reader(store=store, root="/run").path == "/run/a"


def test_without_dataset_records_a_file_still_being_written_makes_it_incomplete(store):
    # The directory rule (checkpoints without records, e.g. a store restored from peers)
    dcp.save(_state(1), storage_writer=ct.Writer(store=store, path="/run/a", dataset=False))
    dcp.save(_state(2), storage_writer=ct.Writer(store=store, path="/run/b", dataset=False))
    f = store.open("/run/b/__1_0.distcp", "wb")  # another rank's shard, still open
    try:
        assert not ct.is_complete("/run/b", store)
        assert ct.latest_checkpoint("/run", store) == "/run/a"
    finally:
        f.close()
    assert ct.latest_checkpoint("/run", store) == "/run/b"


def test_reader_with_nothing_complete_raises_file_not_found(store):
    store.makedirs("/empty")
    with pytest.raises(FileNotFoundError):
        ct.Reader(store=store, root="/empty")
    assert ct.latest_checkpoint("/missing", store) is None
    with pytest.raises(FileNotFoundError):
        ct.Reader(store=store, root="/missing")


def test_async_save_through_the_writer(store):
    src = _state(5)
    fut = dcp.async_save(src, storage_writer=ct.Writer(store=store, path="/run/async"))
    fut.result()
    assert ct.is_complete("/run/async", store)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    dcp.load(dst, storage_reader=ct.Reader(store=store, path="/run/async"))
    assert torch.equal(dst["w"], src["w"])


def test_save_load_helpers_use_torch_save_format(store):
    obj = {"model": torch.nn.Linear(3, 2).state_dict(), "epoch": 7}
    ct.save(obj, "/plain/model.pt", store=store)
    back = ct.load("/plain/model.pt", store=store)
    assert back["epoch"] == 7 and torch.equal(back["model"]["weight"], obj["model"]["weight"])
    # the bytes are a regular torch.save file
    other = torch.load(io.BytesIO(store.read_bytes("/plain/model.pt")))
    assert torch.equal(other["model"]["bias"], obj["model"]["bias"])
    # and a torch.save file written elsewhere loads from the store
    buf = io.BytesIO()
    torch.save(obj, buf)
    store.write_bytes("/plain/elsewhere.pt", buf.getvalue())
    assert ct.load("/plain/elsewhere.pt", store=store)["epoch"] == 7


def test_tensors_are_written_and_read_in_place(store):
    t = torch.arange(1000, dtype=torch.float32)
    with store.open("/t.bin", "wb", buffering=0) as f:
        assert f.write(t) == 4000
    u = torch.zeros(1000)
    assert store.read_into("/t.bin", u) == 4000
    assert torch.equal(t, u)
    h = torch.ones(10, dtype=torch.bfloat16)  # numpy has no bfloat16: viewed as bytes
    with store.open("/h.bin", "wb", buffering=0) as f:
        assert f.write(h) == 20


def test_missing_store_path_errors(store):
    with pytest.raises(FileNotFoundError):
        ct.load("/nope.pt", store=store)


def test_safetensors_written_into_the_store_load_with_the_safetensors_package(store):
    st = pytest.importorskip("safetensors.torch")
    tensors = {
        "emb": torch.randn(100, 16),
        "half": torch.randn(7, dtype=torch.float16),
        "bf": torch.randn(5, 3).to(torch.bfloat16),
        "ids": torch.arange(10, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
    }
    ct.save_safetensors(tensors, "/st/model.safetensors", store=store, metadata={"step": 3})
    theirs = st.load(store.read_bytes("/st/model.safetensors"))
    ours = ct.load_safetensors("/st/model.safetensors", store=store)
    for name, t in tensors.items():
        assert theirs[name].dtype == t.dtype and torch.equal(theirs[name], t), name
        assert ours[name].dtype == t.dtype and torch.equal(ours[name], t), name
    # and a file made by the safetensors package loads through the store
    store.write_bytes("/st/theirs.safetensors", st.save(tensors))
    back = ct.load_safetensors("/st/theirs.safetensors", store=store)
    assert all(torch.equal(back[k], v) for k, v in tensors.items())


def test_truncated_safetensors_is_einval(store):
    import errno

    store.write_bytes("/st/bad", (10**6).to_bytes(8, "little") + b"{}")
    with pytest.raises(OSError) as e:
        ct.load_safetensors("/st/bad", store=store)
    assert e.value.errno == errno.EINVAL

"""ckptfs.datasets (the dataset API of crates/ckptfs-datasets) and the DCP writer/reader
on it: one dataset per save, completed by the metadata written last; the reader without
a path takes the newest dataset complete on any level, restoring PFS-only files."""

import errno
import os
import subprocess
from pathlib import Path

import pytest

import ckptfs
import ckptfs.datasets as cd

ROOT = Path(__file__).resolve().parents[2]


def _ds(store, **kw):
    kw.setdefault("job", "t")
    return cd.Datasets(store, **kw)


def test_begin_complete_list_show_delete_and_errnos(store):
    ds = _ds(store, rank=0, world=1)
    assert ds.latest_restartable() is None
    i = ds.begin("step1")
    store.write_bytes("/ck/1/rank0", b"one" * 1000)
    rec = ds.complete(i)
    assert rec["state"] == "complete" and rec["name"] == "step1" and rec["id"] == i
    assert rec["files"]["/ck/1/rank0"]["size"] == 3000
    with pytest.raises(OSError) as e:
        ds.complete(i)  # D1: twice
    assert e.value.errno == errno.EALREADY
    with pytest.raises(FileNotFoundError):
        ds.complete(999)  # D2: never begun
    with pytest.raises(FileNotFoundError):
        ds.complete()  # no open dataset for this rank
    with pytest.raises(OSError) as e:
        ds.begin("")
    assert e.value.errno == errno.EINVAL
    j = ds.begin("step2")
    assert j > i
    assert [d["state"] for d in ds.list()] == ["complete", "open"]
    assert ds.show(i)["files"]["/ck/1/rank0"]["levels"] == ["local"]
    # an open dataset is never chosen; the complete one is
    assert ds.latest_restartable()["id"] == i
    store.write_bytes("/ck/2/rank0", b"two")
    ds.complete(j)
    assert ds.latest_restartable()["name"] == "step2"
    # a file of the newest dataset damaged (other bytes, same size): the older one
    store.write_bytes("/ck/2/rank0", b"TWO")
    r = ds.restart_search()
    assert r["chosen"]["name"] == "step1"
    assert r["skipped"][0]["name"] == "step2" and "/ck/2/rank0" in r["skipped"][0]["reason"]
    ds.delete(j)
    assert [d["id"] for d in ds.list()] == [i]
    with pytest.raises(FileNotFoundError):
        ds.show(j)
    # module-level functions, other job: separate ids and records
    assert cd.list(store=store, job="other") == []
    k = cd.begin("x", store=store, job="other")
    store.write_bytes("/x/file", b"x")
    assert cd.complete(k, store=store, job="other")["state"] == "complete"
    assert cd.latest_restartable(store=store, job="other")["name"] == "x"
    assert cd.latest_restartable(store=store, job="other", prefix="/nothing") is None


def test_two_ranks_one_dataset_and_an_invalid_part(store):
    r0, r1 = _ds(store, rank=0, world=2), _ds(store, rank=1, world=2)
    i = r0.begin("s")
    assert r1.begin("s") == i  # joins
    store.write_bytes("/s/r0", b"a")
    assert r0.complete(i)["state"] == "open"  # waiting for rank 1
    store.write_bytes("/s/r1", b"b")
    d = r1.complete(i)
    assert d["state"] == "complete" and set(d["files"]) == {"/s/r0", "/s/r1"}
    j = r0.begin("t")
    r1.begin("t")
    assert r0.complete(j, valid=False)["state"] == "invalid"
    assert r0.latest_restartable()["id"] == i


torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import ckptfs.torch as ct  # noqa: E402


def _state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(128, 64, generator=g), "step": torch.tensor(seed)}


def _zeros():
    return {k: torch.zeros_like(v) for k, v in _state(0).items()}


def test_each_dcp_save_is_one_dataset_completed_by_the_metadata(store):
    w1 = ct.Writer(store=store, path="/run/step1", job="t")
    dcp.save(_state(1), storage_writer=w1)
    fut = dcp.async_save(_state(2), storage_writer=ct.Writer(store=store, path="/run/step2", job="t"))
    fut.result()
    recs = _ds(store).list()
    assert [(d["name"], d["state"]) for d in recs] == [("/run/step1", "complete"), ("/run/step2", "complete")]
    files = recs[0]["files"]
    assert set(files) == {"/run/step1/.metadata", "/run/step1/__0_0.distcp"}
    assert files["/run/step1/.metadata"]["size"] == store.stat("/run/step1/.metadata").size
    assert w1.dataset["id"] == recs[0]["id"] and w1.dataset["state"] == "complete"
    r = ct.Reader(store=store, root="/run", job="t")
    assert r.path == "/run/step2"
    dst = _zeros()
    dcp.load(dst, storage_reader=r)
    assert torch.equal(dst["w"], _state(2)["w"])
    # the reader looks only below its root
    assert ct.latest_checkpoint("/run/step1", store, job="t") == "/run/step1"


def test_background_completion_and_zip_crc32_setting(store):
    from torch.utils.serialization import config

    assert config.save.compute_crc32
    w = ct.Writer(store=store, path="/run/bg", job="t", complete_in_background=True)
    dcp.save(_state(4), storage_writer=w)
    assert config.save.compute_crc32  # restored after the write
    d = w.wait(timeout=60)
    assert d["state"] == "complete" and d["name"] == "/run/bg"
    assert ct.latest_checkpoint("/run", store, job="t") == "/run/bg"
    dst = _zeros()
    dcp.load(dst, storage_reader=ct.Reader(store=store, root="/run", job="t"))
    assert torch.equal(dst["w"], _state(4)["w"])
    # with zip_crc32 the shard's records carry CRC32s; both load the same
    dcp.save(_state(5), storage_writer=ct.Writer(store=store, path="/run/crc", job="t", zip_crc32=True))
    dcp.load(dst, storage_reader=ct.Reader(store=store, path="/run/crc"))
    assert torch.equal(dst["w"], _state(5)["w"])


def test_a_failed_save_completes_the_part_invalid(store):
    w = ct.Writer(store=store, path="/run/bad", job="t")

    def rename(src, dst):
        raise OSError(errno.EIO, "the metadata rename failed")

    w.fs.rename = rename
    with pytest.raises(CheckpointException, match="metadata rename failed"):
        dcp.save(_state(3), storage_writer=w)
    (d,) = _ds(store).list()
    assert d["name"] == "/run/bad" and d["state"] == "invalid"
    assert ct.latest_checkpoint("/run", store, job="t") is None


def _ckptfs_bin():
    d = os.environ.get("CKPTFS_BIN_DIR") or str(ROOT / "target" / "release")
    p = Path(d) / "ckptfs"
    if not p.is_file():
        pytest.skip(f"{p} not built (cargo build --release -p ckptfs-cli)")
    return str(p)


def test_reader_restores_a_shard_lost_from_the_store_from_the_pfs(store_name, tmp_path):
    exe = _ckptfs_bin()
    store = ckptfs.Store(store_name, mem_size="16M", chunk_size="64K")
    pfs = tmp_path / "pfs"
    pfs.mkdir()
    for step in (1, 2):
        dcp.save(_state(step), storage_writer=ct.Writer(store=store, path=f"/job/step{step}", job="t"))
    r = subprocess.run(
        [exe, "--store", store_name, "agent", "--dest", str(pfs), "--once"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    # step 2's shard is lost from the node store; step 3 is lost everywhere
    store.remove("/job/step2/__0_0.distcp")
    dcp.save(_state(3), storage_writer=ct.Writer(store=store, path="/job/step3", job="t"))
    store.remove("/job/step3/__0_0.distcp")
    ds = _ds(store, dests=[pfs])
    levels = {d["name"]: d["files"] for d in ds.list()}
    assert levels["/job/step2"]["/job/step2/__0_0.distcp"]["levels"] == ["pfs"]
    assert levels["/job/step1"]["/job/step1/__0_0.distcp"]["levels"] == ["local", "pfs"]
    # without the PFS nothing newer than step 1 is usable
    assert ct.latest_checkpoint("/job", store, job="t", dests=[]) == "/job/step1"
    reader = ct.Reader(store=store, root="/job", job="t", dests=[str(pfs)])
    assert reader.path == "/job/step2"
    assert store.stat("/job/step2/__0_0.distcp").state == "complete"  # restored
    dst = _zeros()
    dcp.load(dst, storage_reader=reader)
    assert torch.equal(dst["w"], _state(2)["w"]) and int(dst["step"]) == 2


def test_protection_under_a_cluster_file_with_erasure_sets_is_the_sets(store, tmp_path, monkeypatch):
    """A complete dataset's protection as Python lists it follows the cluster file as the
    CLI's does (one library function): partner copies by default, the erasure sets when
    its ``[redundancy]`` names a scheme (no daemon needed: nothing is asked)."""
    exe = _ckptfs_bin()
    job = f"sl-prot-{os.getpid()}"
    ds = _ds(store, rank=0, world=1)
    i = ds.begin("step1")
    store.write_bytes("/ck/1/rank0", b"one" * 1000)
    rec = ds.complete(i)
    assert ds.protection(rec)["partner_copies"] == "complete", ds.protection(rec)
    for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_CONFIG", "CKPTFS_DEST"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CKPTFS_CHUNK_SIZE", "64K")
    monkeypatch.setenv("CKPTFS_MEM_SIZE", "8M")
    for redundancy, port, mode in (("partner:1", 26810, "complete"), ("xor", 26820, "erasure")):
        cfile = tmp_path / f"{redundancy.replace(':', '')}.toml"
        r = subprocess.run([exe, "cluster", "init", "--local", "3", "--redundancy", redundancy, "--out", str(cfile),
                            "--port", str(port), "--job", job], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        monkeypatch.setenv("CKPTFS_CLUSTER", str(cfile))
        monkeypatch.setenv("CKPTFS_NODE_ID", "node1")
        try:
            cds = cd.Datasets(None, job=job)
            p = cds.protection(rec)
            assert p["partner_copies"] == mode, (redundancy, p)
            assert ("partner" in p["chosen"]) == (mode == "complete"), (redundancy, p)
            assert p["short"] == ("partner" if mode == "complete" else "erasure"), (redundancy, p)
            del cds
        finally:
            ckptfs.destroy(f"{job}.node1")

"""ckptfs.torch on one node: a full store is ENOSPC naming the store, its size and what
the save needs (Writer and torch.save helper); one creator of a store while ranks start
at once; list_checkpoints / delete_checkpoint / keep_last (one row per checkpoint name,
evicted and failed ones not loadable, the protection each gets, empty directories
removed); dcp.async_save staging into buffers reused across saves; a newer save made
without the Writer is warned about at load; `cluster init --mem` sizes every node's
store."""

import multiprocessing
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.datasets  # noqa: E402,F401
import ckptfs.torch as ct  # noqa: E402


def _sd(step, n=4096):
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(n, generator=g), "step": torch.tensor(step)}


def _zeros(n=4096):
    return {"w": torch.zeros(n), "step": torch.tensor(0)}


def test_a_save_into_a_full_store_is_enospc_naming_store_size_and_need(store_name):
    store = ckptfs.Store(store_name, mem_size="2M", chunk_size="64K")
    big = {"w": torch.zeros(1 << 20)}  # 4 MiB
    # DCP gathers each rank's exception into its CheckpointException: the rank's is
    # the OSError(ENOSPC).
    with pytest.raises(CheckpointException) as e:
        dcp.save(big, storage_writer=ct.Writer(store=store, path="/full/step1"))
    err = e.value.failures[0]
    err = err[0] if isinstance(err, tuple) else err  # (exception, traceback)
    assert isinstance(err, OSError) and err.errno == 28, err
    msg = str(err)
    assert store_name in msg and "2.0 MiB memory" in msg and "needs about 4.0 MiB" in msg, msg
    assert "unexpected pos" not in msg
    # Nothing loadable was left behind, and the helper says the same.
    assert ct.latest_checkpoint("/full", store) is None
    with pytest.raises(OSError) as e:
        ct.save(big, "/full/model.pt", store=store)
    assert e.value.errno == 28 and "torch.save of /full/model.pt" in str(e.value), e.value
    # A save that fits still works.
    dcp.save(_sd(1, 1024), storage_writer=ct.Writer(store=store, path="/full/step2"))
    assert ct.latest_checkpoint("/full", store) == "/full/step2"


def _attach(name, q):
    try:
        s = ckptfs.Store(name, mem_size="32M", chunk_size="64K")
        q.put(s.name)
    except Exception as e:  # noqa: BLE001
        q.put(repr(e))


def test_ranks_starting_at_once_make_one_store_and_all_attach(store_name):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_attach, args=(store_name, q)) for _ in range(4)]
    try:
        for p in ps:
            p.start()
        got = [q.get(timeout=120) for _ in ps]
        for p in ps:
            p.join(60)
        assert got == [store_name] * 4, got
        st = ckptfs.Store(store_name, create=False)
        assert st.info()["mem_size"] == 32 << 20
    finally:
        for p in ps:
            if p.is_alive():
                p.kill()


def test_list_delete_keep_last_one_row_per_name_and_clean_directories(store_name):
    store = ckptfs.Store(store_name, mem_size="64M", chunk_size="64K")
    job = "manage"
    for step in (1, 2, 3):
        dcp.save(_sd(step), storage_writer=ct.Writer(store=store, path=f"/m/step{step}", job=job))
    # step 4: a save whose rank part failed (invalid), then saved again: one row.
    ds = ckptfs.datasets.Datasets(store, job=job)
    i = ds.begin("/m/step4")
    ds.complete(i, valid=False)
    dcp.save(_sd(4), storage_writer=ct.Writer(store=store, path="/m/step4", job=job))
    # step 5: failed, never saved again.
    i = ds.begin("/m/step5")
    ds.complete(i, valid=False)
    rows = ct.list_checkpoints("/m", store, job=job)
    names = [r["name"] for r in rows]
    assert names == ["/m/step1", "/m/step2", "/m/step3", "/m/step4", "/m/step5"], rows
    by = {r["name"]: r for r in rows}
    assert by["/m/step4"]["attempts"] == 2 and by["/m/step4"]["loadable"], by["/m/step4"]
    assert by["/m/step5"]["state"] == "invalid" and not by["/m/step5"]["loadable"]
    assert by["/m/step1"]["levels"] == ["local"] and by["/m/step1"]["size"] > 4096 * 4
    assert by["/m/step1"]["decision"]["level"] in ("local", "partner", "pfs")
    # The protection the policy's choice gives, as `ckptfs ls -l` and `ckpt list` say:
    # by default every complete checkpoint gets partner copies, whatever the choice.
    prot = by["/m/step1"]["protection"]
    assert prot["partner_copies"] == "complete" and prot["chosen"] == ["local", "partner"], prot
    assert prot["short"] == "partner" and not prot["node_local_by_choice"], prot
    assert f"the policy's choice: {prot['policy']['level']}" in prot["note"], prot
    assert by["/m/step5"]["protection"]["short"] == "invalid", by["/m/step5"]
    # keep the newest 2 loadable: steps 1 and 2 go with their directories.
    gone = ct.keep_last(2, "/m", store, job=job)
    assert sorted(gone) == ["/m/step1", "/m/step2"], gone
    assert not store.exists("/m/step1") and not store.exists("/m/step2")
    assert [r["name"] for r in ct.list_checkpoints("/m", store, job=job)] == ["/m/step3", "/m/step4", "/m/step5"]
    assert ct.delete_checkpoint("/m/step3", store, job=job) == 1
    assert not store.exists("/m/step3")
    assert ct.latest_checkpoint("/m", store, job=job) == "/m/step4"
    # Files evicted from memory: not loadable any more.
    for f in store.listdir("/m/step4"):
        store.remove(f"/m/step4/{f}")
    row = [r for r in ct.list_checkpoints("/m", store, job=job) if r["name"] == "/m/step4"][0]
    assert row["state"] == "complete" and not row["loadable"] and row["levels"] == [], row


def test_async_save_stages_into_reused_buffers(store_name):
    store = ckptfs.Store(store_name, mem_size="64M", chunk_size="64K")
    ct.release_staging_buffers()
    ptrs = []
    for step in (1, 2, 3):
        w = ct.Writer(store=store, path=f"/a/step{step}")
        staged = w.stage(_sd(step))
        ptrs.append(staged["w"].data_ptr())
        w._give_back()
    assert ptrs[0] == ptrs[1] == ptrs[2], ptrs
    # A save staged while another still holds its buffers gets its own.
    w1, w2 = ct.Writer(store=store, path="/a/x"), ct.Writer(store=store, path="/a/y")
    a, b = w1.stage(_sd(7)), w2.stage(_sd(8))
    assert a["w"].data_ptr() != b["w"].data_ptr()
    assert torch.equal(a["w"], _sd(7)["w"]) and torch.equal(b["w"], _sd(8)["w"])
    w1._give_back()
    w2._give_back()
    # Through dcp.async_save: every save loads as saved.
    for step in (4, 5):
        dcp.async_save(_sd(step), storage_writer=ct.Writer(store=store, path=f"/a/step{step}")).result()
    for step in (4, 5):
        dst = _zeros()
        dcp.load(dst, storage_reader=ct.Reader(store=store, path=f"/a/step{step}"))
        assert torch.equal(dst["w"], _sd(step)["w"]) and int(dst["step"]) == step
    ct.release_staging_buffers()


def test_a_newer_save_without_the_writer_is_warned_about_at_load(store_name):
    store = ckptfs.Store(store_name, mem_size="64M", chunk_size="64K")
    dcp.save(_sd(1), storage_writer=ct.Writer(store=store, path="/u/step1", job="unrec"))
    dcp.save(_sd(2), storage_writer=ct.Writer(store=store, path="/u/step2", job="unrec", dataset=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ct.latest_checkpoint("/u", store, job="unrec") == "/u/step1"
    msgs = [str(w.message) for w in caught]
    assert any("/u/step2" in m and "no dataset record" in m for m in msgs), msgs
    # Loading it by path still works.
    dst = _zeros()
    dcp.load(dst, storage_reader=ct.Reader(store=store, path="/u/step2"))
    assert torch.equal(dst["w"], _sd(2)["w"])


def test_cluster_init_local_2_puts_each_node_in_its_own_rack(tmp_path):
    from pathlib import Path
    import subprocess

    exe = Path(os.environ.get("CKPTFS_BIN_DIR") or Path(__file__).resolve().parents[2] / "target" / "release") / "ckptfs"
    if not exe.is_file():
        pytest.skip(f"{exe} not built")
    r = subprocess.run([str(exe), "cluster", "init", "--local", "2", "--out", str(tmp_path / "c.toml"), "--port", "30400"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    plan = subprocess.run([str(exe), "cluster", "plan", "--cluster", str(tmp_path / "c.toml")],
                          capture_output=True, text=True).stdout
    assert "rack=r1" in plan and "rack=r2" in plan, plan
    assert "every checkpoint survives the loss of any one failure domain" in plan, plan


def test_cluster_init_mem_sizes_every_nodes_store_unless_a_setting_says_otherwise(tmp_path, monkeypatch):
    """`cluster init --mem 40M`: node1's daemon (no CKPTFS_MEM_SIZE) creates its store
    with 40 MiB, a rank of node2 in cluster mode (only CKPTFS_CLUSTER/CKPTFS_NODE_ID)
    creates node2's with 40 MiB, and CKPTFS_MEM_SIZE still overrides the file."""
    import json
    import signal
    import subprocess
    import time
    from pathlib import Path

    from ckptfs import datasets as cds

    exe = Path(os.environ.get("CKPTFS_BIN_DIR") or Path(__file__).resolve().parents[2] / "target" / "release") / "ckptfs"
    if not exe.is_file():
        pytest.skip(f"{exe} not built")
    # 30300-30399 (conftest.py: the suite's ports).
    port = int(os.environ.get("CKPTFS_TEST_PORT", 30300 + 2 * (os.getpid() % 50)))
    job = f"{os.environ.get('CKPTFS_TEST_TAG', 'pytest')}-mem-{os.getpid()}"
    env = dict(os.environ, CKPTFS_CHUNK_SIZE="64K", CKPTFS_JOB=job)
    for k in ("CKPTFS_MEM_SIZE", "CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_CONFIG", "CKPTFS_DEST"):
        env.pop(k, None)
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CKPTFS_CHUNK_SIZE", "64K")

    def ck(*args, node=None, check=True):
        pre = ["--cluster", "c.toml", "--node-id", node] if node else []
        r = subprocess.run([str(exe), *pre, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert not check or r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    r = ck("cluster", "init", "--local", "2", "--mem", "40M", "--out", "c.toml", "--port", str(port), "--job", job)
    assert "40.0 MiB of memory" in r.stdout, r.stdout
    assert "mem_size = 41943040" in (tmp_path / "c.toml").read_text()
    daemon = subprocess.Popen([str(exe), "node", "--cluster", "c.toml", "--node-id", "node1"], cwd=tmp_path, env=env,
                              stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 60
        while ck("node", "status", node="node1", check=False).returncode != 0:
            assert time.monotonic() < end and daemon.poll() is None, "node1's daemon did not start"
            time.sleep(0.2)
        st = json.loads(ck("status", "--json", node="node1").stdout)
        assert st["name"] == f"{job}.node1" and st["mem_size"] == 40 << 20, st
        # `ckptfs config` says where the size came from.
        conf = ck("config", node="node2").stdout
        assert any("mem_size" in line and "41943040" in line for line in conf.splitlines()), conf
        # A rank of node2 in cluster mode: node2's store, created with the file's size.
        monkeypatch.setenv("CKPTFS_CLUSTER", str(tmp_path / "c.toml"))
        monkeypatch.setenv("CKPTFS_NODE_ID", "node2")
        s2 = cds._store(None)
        assert s2.name == f"{job}.node2" and s2.info()["mem_size"] == 40 << 20, s2.info()
        del s2
        ckptfs.destroy(f"{job}.node2")
        # An explicit setting wins over the cluster file.
        monkeypatch.setenv("CKPTFS_MEM_SIZE", "24M")
        s2 = cds._store(None)
        assert s2.info()["mem_size"] == 24 << 20, s2.info()
        # node1's existing store is attached as it is, whatever this process's setting.
        monkeypatch.setenv("CKPTFS_NODE_ID", "node1")
        monkeypatch.delenv("CKPTFS_MEM_SIZE")
        assert cds._store(None).info()["mem_size"] == 40 << 20
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        for n in ("node1", "node2"):
            ck("destroy", "--force", node=n, check=False)

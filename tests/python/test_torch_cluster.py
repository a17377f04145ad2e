"""A job across two nodes, each with its own store and node daemon (`cluster init --local
2` on 127.0.0.1; tests/python/test_torch_netns.py runs the same job in network
namespaces with torchrun): 2 nodes x 2 ranks (gloo, DDP, Adam) save through
ckptfs.torch.Writer with only CKPTFS_CLUSTER and CKPTFS_NODE_ID set (no store argument),
so each rank writes into its own node's store and the `.metadata` exists only on node1.

- every rank on both nodes loads the newest complete checkpoint with Reader(root=...):
  node2's ranks read node1's `.metadata` and the shards of the replicated tensors
  (written by rank 0 only) through the node daemons, CRC-checked;
- a rank SIGKILLed mid-save leaves that step incomplete job-wide, and the next load
  takes the previous one (saying which one it skipped and why);
- node1 is lost (daemon SIGKILLed, store destroyed) and replaced by an empty one: a job
  of a different world size (1 rank per node) loads every tensor equal to the newest
  complete save, node1's files coming from node2's partner copies (protected by
  default); one process on node2 alone loads the whole job's state (world size 1).

Skipped when target/release/ckptfs is not built (CKPTFS_BIN_DIR chooses another)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402
from cluster_job import _resume_job, _save_job, whole_job  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TAG = os.environ.get("CKPTFS_TEST_TAG", "pytest")
# Two consecutive ports: CKPTFS_TEST_PORT, else one derived from the pid in this test's
# range 30200-30299 (conftest.py: the suite's ports).
PORT = int(os.environ.get("CKPTFS_TEST_PORT", 30200 + 2 * (os.getpid() % 50)))


def _ckptfs_bin():
    d = os.environ.get("CKPTFS_BIN_DIR") or str(ROOT / "target" / "release")
    p = Path(d) / "ckptfs"
    if not p.is_file():
        pytest.skip(f"{p} not built (cargo build --release -p ckptfs-cli)")
    return str(p)


# -- the nodes -------------------------------------------------------------------------------
class _Cluster:
    def __init__(self, exe, work, job, port):
        self.exe, self.work, self.job = exe, work, job
        self.env = dict(os.environ, CKPTFS_MEM_SIZE="64M", CKPTFS_CHUNK_SIZE="64K", CKPTFS_JOB=job)
        for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_DEST"):
            self.env.pop(k, None)
        self.daemons = {}
        self.run("cluster", "init", "--local", "2", "--out", "c.toml", "--port", str(port), "--job", job)
        self.file = str(work / "c.toml")

    def run(self, *args, node=None, check=True):
        pre = ["--cluster", "c.toml", "--node-id", node] if node else []
        r = subprocess.run(
            [self.exe, *pre, *args], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=120
        )
        if check:
            assert r.returncode == 0, (args, r.stdout, r.stderr, self.logs())
        return r

    def start(self, node):
        log = open(self.work / f"{node}.log", "ab")
        self.daemons[node] = subprocess.Popen(
            [self.exe, "node", "--cluster", "c.toml", "--node-id", node], cwd=self.work, env=self.env, stderr=log
        )
        self.until(f"{node}'s daemon", lambda: self.run("node", "status", node=node, check=False).returncode == 0)

    def kill(self, node):
        p = self.daemons.pop(node)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def until(self, what, ok, timeout=90):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ok():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.work.glob("*.log")))

    def close(self):
        for n in list(self.daemons):
            self.kill(n)
        for n in ("node1", "node2"):
            # --force: this test process may still hold a Store of it
            self.run("destroy", "--force", node=n, check=False)


def _as_node(c, node):
    """This test process as a rank of ``node`` (environment of the cluster contract)."""
    os.environ.update(CKPTFS_CLUSTER=c.file, CKPTFS_NODE_ID=node, CKPTFS_JOB=c.job)


def test_two_nodes_every_rank_loads_survives_a_rank_and_a_node_loss(tmp_path, monkeypatch):
    exe = _ckptfs_bin()
    job = f"{TAG}-clu-{os.getpid()}"
    for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_DEST", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CKPTFS_MEM_SIZE", "64M")
    monkeypatch.setenv("CKPTFS_CHUNK_SIZE", "64K")
    c = _Cluster(exe, tmp_path, job, PORT)
    try:
        for n in ("node1", "node2"):
            c.start(n)
        args = (4, 2, c.file, job)
        ctx = mp.spawn(_save_job, args=(*args, str(tmp_path / "pg1"), str(tmp_path)), nprocs=4, join=False)
        with pytest.raises((mp.ProcessExitedException, mp.ProcessRaisedException)) as died:
            while not ctx.join():
                pass
        codes = [p.exitcode for p in ctx.processes]
        print(died.value)  # shown when the test fails
        assert ctx.processes[3].exitcode == -signal.SIGKILL, (codes, str(died.value), c.logs())
        # The .metadata is on node1 only; node2's store has its ranks' shards.
        s2 = ckptfs.Store(f"{job}.node2", create=False)
        assert not s2.exists("/job/step2/.metadata") and s2.exists("/job/step2/__2_0.distcp")

        monkeypatch.setenv("CKPTFS_MEM_SIZE", "64M")
        _as_node(c, "node2")
        rows = {r["name"]: r for r in ct.list_checkpoints("/job")}
        assert rows["/job/step1"]["state"] == "complete" and rows["/job/step2"]["loadable"], rows
        local3 = [d for d in ckptfs.datasets.Datasets(job=job).list() if d["name"] == "/job/step3"]
        assert rows["/job/step3"]["state"] == "incomplete" and not rows["/job/step3"]["loadable"], (rows, local3)
        assert ct.latest_checkpoint("/job") == "/job/step2"
        # One state across the CLI and Python: `ckpt list` of the cluster (on either
        # node) gives each checkpoint's newest dataset the state Python gives it.
        for n in ("node1", "node2"):
            cli = json.loads(c.run("ckpt", "list", "--json", node=n).stdout)["datasets"]
            newest = {d["name"]: d for d in sorted(cli, key=lambda d: d["id"])}
            assert {k: v["state"] for k, v in newest.items()} == {k: v["state"] for k, v in rows.items()}, (
                n, cli, rows)

        # Same world size, every rank on both nodes resumes from step 2.
        mp.spawn(_resume_job, args=(*args, str(tmp_path / "pg2"), str(tmp_path)), nprocs=4, join=True)

        # node1's files of step 2 protected on node2 (the default), then node1 is lost.
        _as_node(c, "node1")
        d2 = [d for d in ckptfs.datasets.Datasets(job=job).list() if d["name"] == "/job/step2"][-1]
        mine = sorted(d2["files"])
        assert "/job/step2/.metadata" in mine

        def copied():
            lv = json.loads(c.run("status", "--json", node="node1").stdout)["levels"]
            return all(lv.get(f, {}).get("partners") == ["node2"] for f in mine)

        c.until("node1's step 2 files copied to node2", copied)
        c.kill("node1")
        c.run("destroy", node="node1")
        with pytest.raises(FileNotFoundError):
            ckptfs.Store(f"{job}.node1", create=False)
        c.start("node1")  # the replacement: same node id, an empty store

        # A different world size (one rank per node): every tensor as step 2 saved it.
        args2 = (2, 1, c.file, job)
        mp.spawn(_resume_job, args=(*args2, str(tmp_path / "pg3"), str(tmp_path)), nprocs=2, join=True)

        # One process on node2 alone loads the whole job's state.
        _as_node(c, "node2")
        reader = whole_job(str(tmp_path))
        # node1's files (its store was replaced) came from node2's partner copies.
        assert reader.fs.sources.get("/job/step2/.metadata") == "node2", reader.fs.sources
    finally:
        for k in ("CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_JOB"):
            os.environ.pop(k, None)
        c.close()


def _warned(fn):
    """``fn()``'s result and the RuntimeWarnings it gave."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_newer_save_without_the_writer_is_warned_about_on_every_node(tmp_path, monkeypatch):
    """Issue 37 item 3 across nodes: node1 saves step1 through the Writer (a dataset),
    then step2 with ``Writer(dataset=False)`` and step3 with torch's own fsspec writer
    (``dcp.save(checkpoint_id="ckptfs://...")``): no record lists them, and their
    ``.metadata`` is in node1's store only. A restart on node2 as on node1 takes step1
    and warns about step2 and step3, naming node1 (node2 learns of them through node1's
    daemon); loading step1 on node2 gives its tensors."""
    import torch.distributed.checkpoint as dcp

    exe = _ckptfs_bin()
    job = f"{TAG}-unrec-{os.getpid()}"
    for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_DEST", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CKPTFS_MEM_SIZE", "64M")
    monkeypatch.setenv("CKPTFS_CHUNK_SIZE", "64K")
    c = _Cluster(exe, tmp_path, job, PORT)
    sd = {s: {"w": torch.full((1000,), float(s)), "step": torch.tensor(s)} for s in (1, 2, 3)}
    try:
        for n in ("node1", "node2"):
            c.start(n)
        _as_node(c, "node1")
        dcp.save(sd[1], storage_writer=ct.Writer(path="/ck/step1"))
        time.sleep(0.01)
        dcp.save(sd[2], storage_writer=ct.Writer(path="/ck/step2", dataset=False))
        time.sleep(0.01)
        dcp.save(sd[3], checkpoint_id=f"ckptfs://{job}.node1/ck/step3", no_dist=True)
        s1 = ckptfs.Store(f"{job}.node1", create=False)
        assert s1.exists("/ck/step3/.metadata") and s1.exists("/ck/step2/.metadata")
        for node in ("node2", "node1"):
            _as_node(c, node)
            got, msgs = _warned(lambda: ct.latest_checkpoint("/ck"))
            assert got == "/ck/step1", (node, got, msgs)
            for step in ("/ck/step2", "/ck/step3"):
                assert any(
                    f"checkpoint {step} (its .metadata is on node node1)" in m and "no dataset record" in m
                    for m in msgs
                ), (node, step, msgs)
            assert not any("/ck/step1 " in m.split("chosen")[0] for m in msgs), msgs
            # The Reader's restart says the same, and loads step1 (node2: through node1's daemon).
            reader, msgs = _warned(lambda: ct.Reader(root="/ck"))
            assert reader.path == "/ck/step1" and any("/ck/step3" in m for m in msgs), (node, msgs)
            dst = {"w": torch.zeros(1000), "step": torch.tensor(0)}
            dcp.load(dst, storage_reader=reader, no_dist=True)
            assert torch.equal(dst["w"], sd[1]["w"]) and int(dst["step"]) == 1, node
    finally:
        for k in ("CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_JOB"):
            os.environ.pop(k, None)
        c.close()

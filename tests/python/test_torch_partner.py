"""Two nodes (`ckptfs node` daemons of a `cluster init --local 2` cluster on 127.0.0.1):
DCP checkpoints saved into node1's store through ckptfs.torch.Writer are copied to the
partner node; node1 is lost (its daemon SIGKILLed, its store destroyed); `ckptfs restore
--from-peers` brings the shards back from the partner's memory and dcp.load gives
identical tensors. Skipped when target/release/ckptfs is not built."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TAG = os.environ.get("CKPTFS_TEST_TAG", "pytest")
# Two consecutive ports: CKPTFS_TEST_PORT, else one derived from the pid in this test's
# range 30000-30099 (conftest.py: the suite's ports).
PORT = int(os.environ.get("CKPTFS_TEST_PORT", 30000 + 2 * (os.getpid() % 50)))


def _ckptfs_bin():
    d = os.environ.get("CKPTFS_BIN_DIR") or str(ROOT / "target" / "release")
    p = Path(d) / "ckptfs"
    if not p.is_file():
        pytest.skip(f"{p} not built (cargo build --release -p ckptfs-cli)")
    return str(p)


def _state(step):
    g = torch.Generator().manual_seed(step)
    return {
        "model": {"w": torch.randn(512, 256, generator=g), "b": torch.randn(256, generator=g)},
        "optim": {"m": torch.randn(512, 256, generator=g).to(torch.bfloat16)},
        "step": torch.tensor(step),
    }


def _zeros():
    return {
        "model": {"w": torch.zeros(512, 256), "b": torch.zeros(256)},
        "optim": {"m": torch.zeros(512, 256, dtype=torch.bfloat16)},
        "step": torch.tensor(0),
    }


class _Cluster:
    def __init__(self, exe, work, job):
        self.exe, self.work, self.job = exe, work, job
        self.env = dict(os.environ, CKPTFS_MEM_SIZE="32M", CKPTFS_CHUNK_SIZE="256K")
        for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_DEST"):
            self.env.pop(k, None)
        self.daemons = {}
        self.run("cluster", "init", "--local", "2", "--out", "c.toml", "--port", str(PORT), "--job", job)

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

    def until(self, what, ok, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ok():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.work.glob("*.log")))

    def close(self):
        for n in list(self.daemons):
            self.kill(n)
        for n in ("node1", "node2"):
            # --force: the test still holds a Store of node1's (it leaked otherwise)
            self.run("destroy", "--force", node=n, check=False)


def test_node_lost_shards_come_back_from_the_partner_and_load_identically(tmp_path):
    exe = _ckptfs_bin()
    job = f"{TAG}-part-{os.getpid()}"
    c = _Cluster(exe, tmp_path, job)
    try:
        for n in ("node1", "node2"):
            c.start(n)
        store = ckptfs.Store(f"{job}.node1", create=False)
        for step in (1, 2):
            w = ct.Writer(store=store, path=f"/job/step{step}", job=job)
            dcp.save(_state(step), storage_writer=w)
            assert w.dataset["state"] == "complete"
        files = [f"/job/step{s}/{n}" for s in (1, 2) for n in (".metadata", "__0_0.distcp")]

        def copied():
            lv = json.loads(c.run("status", "--json", node="node1").stdout)["levels"]
            return all(lv.get(f, {}).get("partners") == ["node2"] for f in files)

        c.until("the shards' partner copies on node2", copied)
        # node1 is lost: its daemon dies, its store is gone
        c.kill("node1")
        del store, w
        c.run("destroy", node="node1")
        with pytest.raises(FileNotFoundError):
            ckptfs.Store(f"{job}.node1", create=False)
        out = c.run("restore", "--from-peers", node="node1").stdout
        for f in files:
            assert any(f in line and "from node2 (partner memory)" in line for line in out.splitlines()), out
        store = ckptfs.Store(f"{job}.node1", create=False)
        # The dataset records (in the store's hidden /.ckptfs, which partners do not
        # copy) were lost with the store: the reader takes the newest directory that
        # passes the directory rule.
        assert ckptfs.datasets.Datasets(store, job=job).list() == []
        reader = ct.Reader(store=store, root="/job", job=job)
        assert reader.path == "/job/step2"
        dst = _zeros()
        dcp.load(dst, storage_reader=reader)
        ref = _state(2)
        assert torch.equal(dst["model"]["w"], ref["model"]["w"]) and torch.equal(dst["model"]["b"], ref["model"]["b"])
        assert torch.equal(dst["optim"]["m"], ref["optim"]["m"]) and int(dst["step"]) == 2
    finally:
        c.close()

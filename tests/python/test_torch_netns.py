"""The job of test_torch_cluster.py under torchrun on two simulated nodes (root only):
each node a network namespace (veth into a bridge of its own namespace, 10.X.Y.I/24)
and a mount namespace with its own /dev/shm, its own store and `ckptfs node` daemon;
torchrun --nnodes 2 --nproc-per-node 2 (static rendezvous, gloo over the veths), DDP +
Adam, each rank writing into its own node's store with only CKPTFS_CLUSTER and
CKPTFS_NODE_ID set.

1. save: steps 1 (dcp.save) and 2 (dcp.async_save); every rank on both nodes loads step
   2 (node2 reads node1's `.metadata` and rank 0's shard through the daemons); step 3
   with rank 3 SIGKILLed mid-shard;
2. a new 2x2 job resumes: step 2 (step 3 passed over, with a warning saying why);
3. node1 is lost: its processes killed, its link down, its /dev/shm gone; a replacement
   node1 (empty /dev/shm, same address) comes up with its daemon;
4. a 2x1 job (another world size) resumes from step 2, every tensor equal;
5. one process on node2 loads the whole job's state of step 2.

Without root (or without ip/nsenter/unshare/torchrun) the test is skipped, or FAILS
when CKPTFS_REQUIRE_ROOT_TESTS=1. Names: `$CKPTFS_NETNS_TAG` (default `pyt`) + pid."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from netnodes import Nodes  # noqa: E402
HERE = Path(__file__).resolve().parent
TAG = os.environ.get("CKPTFS_NETNS_TAG", "pyt")[:4]
# Ports inside the nodes' namespaces, in this test's range all the same (conftest.py:
# the suite's ports): the daemons 30500-30599, torchrun's master 30600-30699.
PORT = int(os.environ.get("CKPTFS_TEST_PORT", 30500 + 2 * (os.getpid() % 50)))
MASTER_PORT = PORT + 100


def _unavailable(why):
    if os.environ.get("CKPTFS_REQUIRE_ROOT_TESTS") == "1":
        pytest.fail(f"root test cannot run (CKPTFS_REQUIRE_ROOT_TESTS=1): {why}")
    pytest.skip(why)


def _ckptfs_bin():
    d = os.environ.get("CKPTFS_BIN_DIR") or str(ROOT / "target" / "release")
    p = Path(d) / "ckptfs"
    if not p.is_file():
        _unavailable(f"{p} not built (cargo build --release -p ckptfs-cli)")
    return str(p)


def _check_available():
    if os.geteuid() != 0:
        _unavailable("needs root (network and mount namespaces)")
    for t in ("ip", "nsenter", "unshare", "mount"):
        if shutil.which(t) is None:
            _unavailable(f"{t} not installed (scripts/setup-netsim.sh)")
    if not (Path(sys.executable).parent / "torchrun").exists():
        _unavailable("torchrun not installed next to the interpreter")


def test_torchrun_two_netns_nodes_rank_and_node_loss_world_size_change(tmp_path):
    _check_available()
    exe = _ckptfs_bin()
    job = f"{TAG}-tr-{os.getpid()}"
    env = dict(os.environ, CKPTFS_MEM_SIZE="128M", CKPTFS_CHUNK_SIZE="64K", CKPTFS_JOB=job)
    for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_DEST", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    r = subprocess.run([exe, "cluster", "init", "--local", "2", "--out", "c.toml", "--port", str(PORT), "--job", job],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        nodes = Nodes(tmp_path, TAG)
    except AssertionError as e:
        _unavailable(f"namespaces could not be made: {e}")
    try:
        text = (tmp_path / "c.toml").read_text()
        for i in (1, 2):
            text = text.replace(f'"127.0.0.1:{PORT + i - 1}"', f'"{nodes.addr(i)}:{PORT + i - 1}"')
        (tmp_path / "c.toml").write_text(text)
        cfile = str(tmp_path / "c.toml")
        logs = {}

        def node_env(i):
            return dict(env, CKPTFS_CLUSTER=cfile, CKPTFS_NODE_ID=f"node{i}", GLOO_SOCKET_IFNAME="eth0",
                        PYTHONPATH=str(HERE), OMP_NUM_THREADS="1")

        def log(name):
            logs[name] = tmp_path / f"{name}.log"
            return open(logs[name], "ab")

        def start_daemon(i):
            with log(f"daemon{i}") as f:
                nodes.popen(i, [exe, "node", "--cluster", cfile, "--node-id", f"node{i}"], node_env(i), f)
            end = time.monotonic() + 60
            while nodes.run(i, [exe, "--cluster", cfile, "--node-id", f"node{i}", "node", "status"],
                            node_env(i)).returncode != 0:
                assert time.monotonic() < end, _tail(logs)
                time.sleep(0.2)

        def torchrun(nproc, mode, *extra, expect_ok=True):
            ps = []
            for i in (1, 2):
                with log(f"{mode}{nproc}-node{i}") as f:
                    ps.append(nodes.popen(i, [
                        str(Path(sys.executable).parent / "torchrun"), "--nnodes=2", f"--nproc-per-node={nproc}",
                        f"--node-rank={i - 1}", f"--master-addr={nodes.addr(1)}", f"--master-port={MASTER_PORT}",
                        str(HERE / "cluster_job.py"), mode, str(tmp_path), *extra,
                    ], node_env(i), f))
            codes = [p.wait(timeout=300) for p in ps]
            if expect_ok:
                assert codes == [0, 0], (codes, _tail(logs))
            return codes

        start_daemon(1)
        start_daemon(2)
        # 1. save, every rank loads, then rank 3 SIGKILLed in step 3
        codes = torchrun(2, "save", expect_ok=False)
        assert codes[1] != 0, _tail(logs)
        out2 = logs["save2-node2"].read_text()
        assert "Signal 9" in out2 or "SIGKILL" in out2, _tail(logs)
        # 2. same world size resumes from step 2
        torchrun(2, "resume", "4")
        assert logs["resume2-node2"].read_text().count("step 2 loaded equal") == 2, _tail(logs)
        # node1's step-2 files reach node2 (protected by default), then node1 is lost
        st = json.loads(nodes.run(1, [exe, "--cluster", cfile, "--node-id", "node1", "ckpt", "list", "--json"],
                                  node_env(1)).stdout or "[]")
        assert st, _tail(logs)

        def copied():
            o = nodes.run(1, [exe, "--cluster", cfile, "--node-id", "node1", "status", "--json"], node_env(1))
            lv = json.loads(o.stdout)["levels"]
            want = [f for f in lv if f.startswith("/job/step2/")]
            return want and all(lv[f].get("partners") == ["node2"] for f in want)

        end = time.monotonic() + 90
        while not copied():
            assert time.monotonic() < end, _tail(logs)
            time.sleep(0.3)
        nodes.lose(1)
        nodes.replace(1)
        start_daemon(1)
        # 4. another world size: one rank per node
        torchrun(1, "resume", "4")
        # 5. one process on node2 alone
        r = nodes.run(2, [sys.executable, str(HERE / "cluster_job.py"), "whole", str(tmp_path)], node_env(2))
        assert r.returncode == 0, (r.stdout, r.stderr, _tail(logs))
    finally:
        nodes.close()


def _tail(logs):
    return "\n".join(f"--- {k}\n{p.read_text()[-3000:]}" for k, p in logs.items() if p.exists())

#!/usr/bin/env python3
"""ckptfs bench torch --nodes 2: the training stall of dcp.save and dcp.async_save
through ckptfs.torch.Writer on a node of a 2-node cluster, against a copy of the state
in memory and torch's FileSystemWriter on /dev/shm and on disk, and the time from the
start of the save to "protected on another node" (every file of the checkpoint with a
partner copy on node2, as `ckptfs status --json` reports it), on links limited to each
rate of --links (tc tbf on both nodes' veths).

Root only: two simulated nodes (scripts/netnodes.py: network namespaces, each node its
own /dev/shm, store and `ckptfs node` daemon). One process on node1 saves (no process
group: the per-rank cost); node2 holds the partner copies.

Run:  ckptfs bench torch --nodes 2 [--sizes 256M] [--reps 3] [--links 1gbit,10gbit] [--json]
 or:  .venv/bin/python scripts/bench-torch-nodes.py (same options; CKPTFS_BIN names ckptfs)

Rows per link rate and size (median of --reps):
  memcpy            Tensor.copy_ of every tensor into warm preallocated tensors
  ckptfs            dcp.save through ckptfs.torch.Writer: stall; protected (save start to
                    every file copied to node2); wire (the checkpoint's bytes at the link
                    rate: the floor for "protected")
  ckptfs-async      dcp.async_save through the Writer: stall (until async_save returns),
                    done (its future), protected
  fs-/dev/shm, fs-disk   torch's FileSystemWriter (sync_files=True, its default): stall
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def size_of(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def rate_bps(r):
    r = r.lower()
    for suf, m in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if r.endswith(suf):
            return float(r[: -len(suf)]) * m
    return float(r)


# -- inner: runs on node1 --------------------------------------------------------------------
def inner(a):
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    import ckptfs.torch as ct

    exe, cfile = os.environ["CKPTFS_BIN"], os.environ["CKPTFS_CLUSTER"]
    size = size_of(a.size)
    n = 16
    per = size // 4 // n
    sd = {f"t{i}": torch.randn(per) for i in range(n)}
    nbytes = sum(t.numel() * 4 for t in sd.values())
    dst = {k: torch.empty_like(v) for k, v in sd.items()}

    def protected_after(path, t0, timeout=300):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            o = subprocess.run([exe, "--cluster", cfile, "--node-id", "node1", "status", "--json"],
                               capture_output=True, text=True)
            lv = json.loads(o.stdout or "{}").get("levels", {})
            mine = [f for f in lv if f.startswith(path + "/")]
            if mine and any(f.endswith("/.metadata") for f in mine) and all(
                "node2" in (lv[f].get("partners") or []) for f in mine
            ):
                return time.monotonic() - t0
            time.sleep(0.02)
        return float("nan")

    rows = {"memcpy": [], "ckptfs": [], "ckptfs-protected": [], "async": [], "async-done": [],
            "async-protected": [], "fs-/dev/shm": [], "fs-disk": []}
    def clear():
        # One checkpoint at a time in the stores: node2 holds node1's copies within its
        # quota, and the previous ones are released when deleted here.
        for k in ct.list_checkpoints("/bench"):
            ct.delete_checkpoint(k["name"])

    for r in range(a.reps):
        for k, v in sd.items():  # warm
            dst[k].copy_(v)
        t0 = time.monotonic()
        for k, v in sd.items():
            dst[k].copy_(v)
        rows["memcpy"].append(time.monotonic() - t0)

        clear()
        p = f"/bench/{a.link}/s{r}"
        t0 = time.monotonic()
        dcp.save(sd, storage_writer=ct.Writer(path=p))
        rows["ckptfs"].append(time.monotonic() - t0)
        rows["ckptfs-protected"].append(protected_after(p, t0))

        clear()
        p = f"/bench/{a.link}/a{r}"
        t0 = time.monotonic()
        fut = dcp.async_save(sd, storage_writer=ct.Writer(path=p))
        rows["async"].append(time.monotonic() - t0)
        fut.result()
        rows["async-done"].append(time.monotonic() - t0)
        rows["async-protected"].append(protected_after(p, t0))

        for name, base in (("fs-/dev/shm", "/dev/shm"), ("fs-disk", a.disk)):
            d = tempfile.mkdtemp(prefix=f"{a.tag}-fs-", dir=base)
            try:
                t0 = time.monotonic()
                dcp.save(sd, storage_writer=FileSystemWriter(d))
                rows[name].append(time.monotonic() - t0)
            finally:
                shutil.rmtree(d, ignore_errors=True)
    clear()
    ct.release_staging_buffers()
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    med["bytes"] = nbytes
    med["wire"] = nbytes * 8 / rate_bps(a.link)
    print("RESULT " + json.dumps(med))


# -- driver: sets up the nodes ---------------------------------------------------------------
def driver(a):
    sys.path.insert(0, str(HERE))
    from netnodes import Nodes

    if os.geteuid() != 0:
        sys.exit("bench torch --nodes 2: needs root (network and mount namespaces)")
    exe = os.environ.get("CKPTFS_BIN") or shutil.which("ckptfs")
    if not exe:
        sys.exit("bench torch --nodes 2: set CKPTFS_BIN to the ckptfs binary")
    work = Path(tempfile.mkdtemp(prefix=f"{a.tag}-nodes-"))
    job = f"{a.tag}-{os.getpid()}"
    biggest = max(size_of(s) for s in a.sizes.split(","))
    env = dict(os.environ, CKPTFS_MEM_SIZE=str(6 * biggest + (64 << 20)), CKPTFS_CHUNK_SIZE="1M",
               CKPTFS_JOB=job, CKPTFS_BIN=exe)
    for k in ("CKPTFS_STORE", "CKPTFS_DEST"):
        env.pop(k, None)
    subprocess.run([exe, "cluster", "init", "--local", "2", "--out", "c.toml", "--port", str(a.port), "--job", job],
                   cwd=work, env=env, check=True, capture_output=True)
    nodes = Nodes(work, a.tag, shm_size=f"{8 * biggest // (1 << 20) + 256}m")
    out = []
    try:
        text = (work / "c.toml").read_text()
        for i in (1, 2):
            text = text.replace(f'"127.0.0.1:{a.port + i - 1}"', f'"{nodes.addr(i)}:{a.port + i - 1}"')
        (work / "c.toml").write_text(text)
        cfile = str(work / "c.toml")

        def nenv(i):
            return dict(env, CKPTFS_CLUSTER=cfile, CKPTFS_NODE_ID=f"node{i}")

        for i in (1, 2):
            with open(work / f"daemon{i}.log", "ab") as f:
                nodes.popen(i, [exe, "node", "--cluster", cfile, "--node-id", f"node{i}"], nenv(i), f)
            end = time.monotonic() + 60
            while nodes.run(i, [exe, "--cluster", cfile, "--node-id", f"node{i}", "node", "status"],
                            nenv(i)).returncode != 0:
                if time.monotonic() > end:
                    sys.exit(f"node{i}'s daemon did not start: {(work / f'daemon{i}.log').read_text()}")
                time.sleep(0.2)
        for link in a.links.split(","):
            for i in (1, 2):
                nodes.limit(i, link)
            for size in a.sizes.split(","):
                r = nodes.run(1, [sys.executable, str(Path(__file__).resolve()), "--inner", "--size", size,
                                  "--reps", str(a.reps), "--link", link, "--disk", a.disk, "--tag", a.tag],
                              nenv(1), timeout=3600)
                line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
                if r.returncode != 0 or not line:
                    sys.exit(f"bench on node1 failed ({link}, {size}):\n{r.stdout}\n{r.stderr}")
                res = json.loads(line[0][7:])
                res.update(link=link, size=size)
                out.append(res)
    finally:
        nodes.close()
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'link':>7} {'size':>6} {'memcpy':>8} {'ckptfs':>8} {'async':>8} {'async-done':>10} "
          f"{'fs-shm':>8} {'fs-disk':>8} {'wire':>7} {'prot-sync':>9} {'prot-async':>10}   (seconds)")
    for r in out:
        print(f"{r['link']:>7} {r['size']:>6} {r['memcpy']:8.3f} {r['ckptfs']:8.3f} {r['async']:8.3f} "
              f"{r['async-done']:10.3f} {r['fs-/dev/shm']:8.3f} {r['fs-disk']:8.3f} {r['wire']:7.3f} "
              f"{r['ckptfs-protected']:9.3f} {r['async-protected']:10.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256M")
    ap.add_argument("--size", default="256M", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--links", default="1gbit,10gbit")
    ap.add_argument("--link", default="1gbit", help=argparse.SUPPRESS)
    ap.add_argument("--disk", default="/var/tmp")
    ap.add_argument("--port", type=int, default=47330)
    ap.add_argument("--tag", default="bench-torch")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        inner(a)
    else:
        driver(a)


if __name__ == "__main__":
    main()

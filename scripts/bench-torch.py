#!/usr/bin/env python3
"""ckptfs bench torch: how long dcp.save / dcp.async_save block the caller (the training
stall) when writing through ckptfs.torch.Writer into a node store, vs torch's
FileSystemWriter on /dev/shm and on local disk, and vs a plain memcpy of the state dict's
bytes; dcp.load times from the store, from a partner node's memory and from the PFS
directory.

Run:  ckptfs bench torch [--sizes 1G,4G] [--reps 3] [--disk DIR] [--remote-max 1G] [--tag T] [--json]
 or:  .venv/bin/python scripts/bench-torch.py (same options)

Rows (median of --reps; one process, no process group: the per-rank cost):
  memcpy       Tensor.copy_ of every tensor into warm preallocated tensors
  store-raw    File.write of every tensor's buffer into one store file (no torch.save,
               no DCP): the floor of any writer copying into the store
  ckptfs       ckptfs.torch.Writer (dataset completion inside dcp.save: it combines the
               store's per-chunk CRC32Cs, no read), its async_save, and dcp.load with
               ckptfs.torch.Reader
  ckptfs-bg    the same writer with complete_in_background=True (stall: until dcp.save
               returns; total: until the dataset is complete)
  fs-/dev/shm, fs-disk   torch's FileSystemWriter/Reader (its defaults: sync_files=True)
  partner      node1's store lost; `ckptfs restore --from-peers` from node2's memory
               (restore_s), then dcp.load from the store (load_s); two node daemons of
               `cluster init --local 2` on 127.0.0.1
  pfs          the checkpoint drained by `ckptfs agent --once` to DISK/pfs; dcp.load of
               that directory with torch's FileSystemReader (warm page cache)
Stall profile of the ckptfs row (time stamps): plan (DCP planning, before write_data),
write (the tensors into the store), metadata (.metadata written and renamed), complete
(the dataset's completion).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CKPTFS = os.environ.get("CKPTFS_BIN") or str(ROOT / "target" / "release" / "ckptfs")
med = statistics.median


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)


def state_dict(nbytes):
    """A model-like state dict: 16 float32 tensors adding up to nbytes."""
    n = 16
    per = nbytes // n // 4
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(per, generator=g) for i in range(n)}


def empty_like(sd):
    return {k: torch.empty_like(v) for k, v in sd.items()}


def check_same(a, b, what):
    for k in a:
        if not torch.equal(a[k], b[k]):
            raise SystemExit(f"bench torch: {what}: tensor {k} differs after load")


class ProfWriter(ct.Writer):
    """ckptfs.torch.Writer with time stamps of the save's phases."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.t = {}

    def write_data(self, plan, planner):
        self.t["write0"] = time.perf_counter()
        r = super().write_data(plan, planner)
        self.t["write1"] = time.perf_counter()
        return r

    def finish(self, metadata, results):
        self.t["finish0"] = time.perf_counter()
        super().finish(metadata, results)
        self.t["finish1"] = time.perf_counter()

    def _complete(self, valid):
        t0 = time.perf_counter()
        r = super()._complete(valid)
        self.t["complete"] = self.t.get("complete", 0.0) + time.perf_counter() - t0
        return r


def case(save_writer, reader, cleanup, sd, reps, async_too=True):
    """Sync save (stall = the call), load, then async save (stall, total)."""
    out = {"save_stall_s": [], "async_stall_s": [], "async_total_s": [], "load_s": [], "profile": []}
    for _ in range(reps):
        cleanup()
        w = save_writer("s")
        t0 = time.perf_counter()
        dcp.save(sd, storage_writer=w)
        t1 = time.perf_counter()
        out["save_stall_s"].append(t1 - t0)
        if isinstance(w, ProfWriter):
            c = w.t.get("complete", 0.0)
            out["profile"].append(
                {
                    "plan_s": w.t["write0"] - t0,
                    "write_s": w.t["write1"] - w.t["write0"],
                    "metadata_s": w.t["finish1"] - w.t["finish0"] - c,
                    "complete_s": c,
                    "rest_s": t1 - w.t["finish1"] + (w.t["finish0"] - w.t["write1"]),
                }
            )
        if reader is not None:
            dst = empty_like(sd)
            t0 = time.perf_counter()
            dcp.load(dst, storage_reader=reader("s"))
            out["load_s"].append(time.perf_counter() - t0)
            check_same(sd, dst, "load")
            del dst
        if async_too:
            cleanup()
            t0 = time.perf_counter()
            fut = dcp.async_save(sd, storage_writer=save_writer("a"))
            out["async_stall_s"].append(time.perf_counter() - t0)
            fut.result()
            out["async_total_s"].append(time.perf_counter() - t0)
    cleanup()
    res = {k: med(v) for k, v in out.items() if v and k != "profile"}
    if out["profile"]:
        res["profile"] = {k: med(p[k] for p in out["profile"]) for k in out["profile"][0]}
    return res


def run(args, **kw):
    r = subprocess.run([CKPTFS, *args], capture_output=True, text=True, timeout=1800, **kw)
    if r.returncode != 0:
        raise SystemExit(f"bench torch: ckptfs {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def pfs_case(store, sd, nbytes, pfs, reps):
    """Drain the store's checkpoint to the PFS directory; load it with FileSystemReader."""
    loads = []
    for _ in range(reps):
        if store.exists("/pfsb"):
            store.rmtree("/pfsb")
        shutil.rmtree(pfs, ignore_errors=True)
        os.makedirs(pfs)
        dcp.save(sd, storage_writer=ct.Writer(store=store, path="/pfsb/x", dataset=False))
        t0 = time.perf_counter()
        run(["--store", store.name, "agent", "--dest", pfs, "--once"])
        drain = time.perf_counter() - t0
        dst = empty_like(sd)
        t0 = time.perf_counter()
        dcp.load(dst, storage_reader=FileSystemReader(os.path.join(pfs, "pfsb", "x")))
        loads.append((time.perf_counter() - t0, drain))
        check_same(sd, dst, "pfs load")
        del dst
    store.rmtree("/pfsb")
    shutil.rmtree(pfs, ignore_errors=True)
    return {"target": "pfs", "bytes": nbytes, "load_s": med(x[0] for x in loads), "drain_s": med(x[1] for x in loads)}


def partner_case(sd, nbytes, work, port, reps, tag):
    """Two node daemons; save on node1, wait for node2's copy, lose node1, restore, load."""
    job = f"{tag}-p{os.getpid()}"
    env = dict(os.environ, CKPTFS_MEM_SIZE=str(int(nbytes * 1.2) + (128 << 20)), CKPTFS_CHUNK_SIZE="1M")
    for k in ("CKPTFS_STORE", "CKPTFS_CLUSTER", "CKPTFS_NODE_ID", "CKPTFS_DEST"):
        env.pop(k, None)
    kw = {"cwd": work, "env": env}
    run(["cluster", "init", "--local", "2", "--out", "c.toml", "--port", str(port), "--job", job, "--force"], **kw)
    daemons = {}

    def start(n):
        log = os.path.join(work, f"{n}.log")
        with open(log, "ab") as f:
            daemons[n] = subprocess.Popen([CKPTFS, "node", "--cluster", "c.toml", "--node-id", n], stderr=f, **kw)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            r = subprocess.run(
                [CKPTFS, "--cluster", "c.toml", "--node-id", n, "node", "status"], capture_output=True, **kw
            )
            if r.returncode == 0:
                return
            if daemons[n].poll() is not None:
                break
            time.sleep(0.1)
        with open(log) as f:
            raise SystemExit(f"bench torch: node daemon {n} did not start: {r.stderr.strip()}; its log: {f.read()}")

    def stop(p):
        p.send_signal(signal.SIGKILL)
        p.wait()

    def node(n, *a):
        return run(["--cluster", "c.toml", "--node-id", n, *a], **kw)

    rows = []
    try:
        for rep in range(reps):
            # A fresh pair each repetition (both stores destroyed after it): a restored
            # node's daemon does not know the partner still holds the previous copies.
            start("node2")
            start("node1")
            store = ckptfs.Store(f"{job}.node1", create=False)
            if store.exists("/pb"):
                store.rmtree("/pb")
            dcp.save(sd, storage_writer=ct.Writer(store=store, path=f"/pb/{rep}", job=job))
            files = [f"/pb/{rep}/.metadata", f"/pb/{rep}/__0_0.distcp"]
            end = time.monotonic() + 300
            while True:
                lv = json.loads(node("node1", "status", "--json"))["levels"]
                if all(lv.get(f, {}).get("partners") for f in files):
                    break
                if time.monotonic() > end:
                    raise SystemExit(f"bench torch: the partner copy did not complete in 300 s: {lv}")
                time.sleep(0.05)
            stop(daemons.pop("node1"))
            del store
            node("node1", "destroy")
            t0 = time.perf_counter()
            node("node1", "restore", "--from-peers")
            restore = time.perf_counter() - t0
            store = ckptfs.Store(f"{job}.node1", create=False)
            dst = empty_like(sd)
            t0 = time.perf_counter()
            dcp.load(dst, storage_reader=ct.Reader(store=store, root="/pb", job=job))
            rows.append((restore, time.perf_counter() - t0))
            check_same(sd, dst, "partner load")
            del dst, store
            for n in list(daemons):
                stop(daemons.pop(n))
            for n in ("node1", "node2"):
                node(n, "destroy")
    finally:
        for p in daemons.values():
            stop(p)
        for n in ("node1", "node2"):
            subprocess.run([CKPTFS, "--cluster", "c.toml", "--node-id", n, "destroy"], capture_output=True, **kw)
    restore = med(r[0] for r in rows)
    load = med(r[1] for r in rows)
    return {"target": "partner", "bytes": nbytes, "restore_s": restore, "load_s": load, "restore_load_s": restore + load}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1G,4G")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--disk", default="/var/tmp", help="directory on local disk")
    ap.add_argument("--remote-max", default="1G", help="partner and PFS loads for sizes up to this (0: none)")
    ap.add_argument("--port", type=int, default=27310, help="first of two free ports (partner case)")
    ap.add_argument("--tag", default="bench-torch", help="prefix of the store, job and temporary names")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    remote_max = parse_size(a.remote_max)
    rows = []
    shm = tempfile.mkdtemp(prefix=f"{a.tag}-", dir="/dev/shm")
    disk = tempfile.mkdtemp(prefix=f"{a.tag}-", dir=a.disk)
    name = f"{a.tag}-{os.getpid()}"
    try:
        for size in sizes:
            sd = state_dict(size)
            nbytes = sum(t.numel() * t.element_size() for t in sd.values())
            dst = empty_like(sd)
            for d, v in zip(dst.values(), sd.values()):
                d.copy_(v)  # fault the destination in first: memcpy into warm memory
            copies = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                for d, v in zip(dst.values(), sd.values()):
                    d.copy_(v)
                copies.append(time.perf_counter() - t0)
            del dst
            rows.append({"target": "memcpy", "bytes": nbytes, "save_stall_s": med(copies)})

            store = ckptfs.Store(name, mem_size=int(nbytes * 1.15) + (128 << 20), chunk_size="1M")

            def rm_store():
                if store.exists("/bench"):
                    store.rmtree("/bench")

            raw = []
            for _ in range(a.reps):
                rm_store()
                store.makedirs("/bench")
                t0 = time.perf_counter()
                with store.open("/bench/raw", "wb", buffering=0) as f:
                    for v in sd.values():
                        f.write(v)  # the tensor's buffer, copied once into the store
                raw.append(time.perf_counter() - t0)
            rm_store()
            rows.append({"target": "store-raw", "bytes": nbytes, "save_stall_s": med(raw)})
            rows.append(
                {
                    "target": "ckptfs",
                    "bytes": nbytes,
                    **case(
                        lambda tag: ProfWriter(store=store, path=f"/bench/{tag}", job=name),
                        lambda tag: ct.Reader(store=store, path=f"/bench/{tag}"),
                        rm_store,
                        sd,
                        a.reps,
                    ),
                }
            )
            bg = []
            for _ in range(a.reps):
                rm_store()
                w = ct.Writer(store=store, path="/bench/bg", job=name, complete_in_background=True)
                t0 = time.perf_counter()
                dcp.save(sd, storage_writer=w)
                t1 = time.perf_counter()
                w.wait()
                bg.append((t1 - t0, time.perf_counter() - t0))
            rm_store()
            rows.append(
                {
                    "target": "ckptfs-bg",
                    "bytes": nbytes,
                    "save_stall_s": med(b[0] for b in bg),
                    "save_total_s": med(b[1] for b in bg),
                }
            )
            if size <= remote_max:
                rows.append(pfs_case(store, sd, nbytes, os.path.join(disk, "pfs"), a.reps))
            del store
            ckptfs.destroy(name)
            for tname, base in (("fs-/dev/shm", shm), ("fs-disk", disk)):

                def rm_dir(base=base):
                    for n in os.listdir(base):
                        shutil.rmtree(os.path.join(base, n))

                rows.append(
                    {
                        "target": tname,
                        "bytes": nbytes,
                        **case(
                            lambda tag, base=base: FileSystemWriter(os.path.join(base, tag)),
                            lambda tag, base=base: FileSystemReader(os.path.join(base, tag)),
                            rm_dir,
                            sd,
                            a.reps,
                        ),
                    }
                )
            if size <= remote_max:
                work = tempfile.mkdtemp(prefix=f"{a.tag}-cluster-")
                try:
                    rows.append(partner_case(sd, nbytes, work, a.port, a.reps, a.tag))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
            del sd
        for r in rows:
            base = next(x for x in rows if x["target"] == "memcpy" and x["bytes"] == r["bytes"])
            disk_row = next((x for x in rows if x["target"] == "fs-disk" and x["bytes"] == r["bytes"]), None)
            if "save_stall_s" in r:
                r["vs_memcpy"] = r["save_stall_s"] / base["save_stall_s"]
                if disk_row and r["target"] != "memcpy":
                    r["disk_stall_over_this"] = disk_row["save_stall_s"] / r["save_stall_s"]
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)
        try:
            ckptfs.destroy(name)
        except FileNotFoundError:
            pass
    load = os.getloadavg()
    doc = {"reps": a.reps, "torch": torch.__version__, "loadavg": load, "rows": rows}
    if a.json:
        print(json.dumps(doc, indent=1))
        return
    cols = ["save_stall_s", "vs_memcpy", "disk_stall_over_this", "async_stall_s", "async_total_s", "save_total_s",
            "load_s", "restore_s", "drain_s"]
    print(f"ckptfs bench torch  reps={a.reps} torch={torch.__version__} (medians; one process; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    print(f"{'target':>12} {'MiB':>6} " + " ".join(f"{c:>20}" for c in cols))
    for r in rows:
        vals = [f"{r[c]:.4f}" if isinstance(r.get(c), float) else "" for c in cols]
        print(f"{r['target']:>12} {r['bytes'] / (1 << 20):>6.0f} " + " ".join(f"{v:>20}" for v in vals))
        if "profile" in r:
            p = r["profile"]
            print(f"{'':>19} stall profile: " + ", ".join(f"{k[:-2]} {v:.4f}" for k, v in p.items()))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ckptfs bench torch: how long dcp.save / dcp.async_save block the caller when writing
through ckptfs.torch.Writer into a node store, vs torch's FileSystemWriter on /dev/shm
and on local disk, and vs a plain memcpy of the state dict's bytes; and dcp.load times.

Run:  .venv/bin/python scripts/bench-torch.py [--sizes 64M,256M] [--reps 3] [--disk DIR] [--json]

Each case is run --reps times and the median printed. One process (no process group):
the figures are the per-rank cost. The store is created for the run and destroyed after.
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402


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


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def run_case(make_writer, make_reader, sd, reps, cleanup):
    stall, total, async_stall, async_total, load = [], [], [], [], []
    for _ in range(reps):
        cleanup()
        s, _ = timed(lambda: dcp.save(sd, storage_writer=make_writer("sync")))
        stall.append(s)
        total.append(s)
        t0 = time.perf_counter()
        fut = dcp.async_save(sd, storage_writer=make_writer("async"))
        async_stall.append(time.perf_counter() - t0)
        fut.result()
        async_total.append(time.perf_counter() - t0)
        dst = {k: torch.empty_like(v) for k, v in sd.items()}
        s, _ = timed(lambda: dcp.load(dst, storage_reader=make_reader("sync")))
        load.append(s)
    cleanup()
    med = statistics.median
    return {
        "save_stall_s": med(stall),
        "async_stall_s": med(async_stall),
        "async_total_s": med(async_total),
        "load_s": med(load),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64M,256M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--disk", default="/var/tmp", help="directory on local disk")
    ap.add_argument("--store", default=f"bench-torch-{os.getpid()}")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    store = ckptfs.Store(a.store, mem_size=max(sizes) * 3 + (64 << 20), chunk_size="1M")
    rows = []
    shm = tempfile.mkdtemp(prefix="bench-torch-", dir="/dev/shm")
    disk = tempfile.mkdtemp(prefix="bench-torch-", dir=a.disk)
    try:
        for size in sizes:
            sd = state_dict(size)
            nbytes = sum(t.numel() * t.element_size() for t in sd.values())
            dst = {k: torch.empty_like(v) for k, v in sd.items()}
            for d, v in zip(dst.values(), sd.values()):
                d.copy_(v)  # fault the destination in first: memcpy into warm memory
            copies = []
            for _ in range(a.reps):
                s, _ = timed(lambda: [d.copy_(v) for d, v in zip(dst.values(), sd.values())])
                copies.append(s)
            memcpy = statistics.median(copies)
            del dst
            rows.append({"target": "memcpy", "bytes": nbytes, "save_stall_s": memcpy})

            def rm_store():
                if store.exists("/bench"):
                    store.rmtree("/bench")

            rows.append(
                {
                    "target": "ckptfs",
                    "bytes": nbytes,
                    **run_case(
                        lambda tag: ct.Writer(store=store, path=f"/bench/{tag}"),
                        lambda tag: ct.Reader(store=store, path=f"/bench/{tag}"),
                        sd,
                        a.reps,
                        rm_store,
                    ),
                }
            )
            for name, base in (("fs-/dev/shm", shm), ("fs-disk", disk)):

                def rm_dir(base=base):
                    for n in os.listdir(base):
                        shutil.rmtree(os.path.join(base, n))

                rows.append(
                    {
                        "target": name,
                        "bytes": nbytes,
                        **run_case(
                            lambda tag, base=base: FileSystemWriter(os.path.join(base, tag)),
                            lambda tag, base=base: FileSystemReader(os.path.join(base, tag)),
                            sd,
                            a.reps,
                            rm_dir,
                        ),
                    }
                )
            del sd
        for r in rows:
            base = next(x for x in rows if x["target"] == "memcpy" and x["bytes"] == r["bytes"])
            disk_row = next((x for x in rows if x["target"] == "fs-disk" and x["bytes"] == r["bytes"]), None)
            r["vs_memcpy"] = r["save_stall_s"] / base["save_stall_s"]
            if disk_row and "load_s" in r:
                r["disk_stall_over_this"] = disk_row["save_stall_s"] / r["save_stall_s"]
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)
        ckptfs.destroy(a.store)
    if a.json:
        print(json.dumps({"reps": a.reps, "torch": torch.__version__, "rows": rows}, indent=1))
        return
    cols = ["target", "MiB", "save_stall_s", "GB/s", "vs_memcpy", "disk_stall_over_this", "async_stall_s", "async_total_s", "load_s"]
    print(f"ckptfs bench torch  reps={a.reps} torch={torch.__version__} (median of reps; one process)")
    print("  ".join(f"{c:>20}" if i else f"{c:>12}" for i, c in enumerate(cols)))
    for r in rows:
        vals = [r["target"], f"{r['bytes'] / (1 << 20):.0f}", f"{r['save_stall_s']:.4f}", f"{r['bytes'] / r['save_stall_s'] / 1e9:.2f}"]
        for c in cols[4:]:
            v = r.get(c)
            vals.append(f"{v:.3f}" if isinstance(v, float) else "")
        print("  ".join(f"{v:>20}" if i else f"{v:>12}" for i, v in enumerate(vals)))


if __name__ == "__main__":
    main()

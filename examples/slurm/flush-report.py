#!/usr/bin/env python3
"""The job-end flush report of examples/slurm/ckptfs-job.sh.

Per node, from the job directory: the newest complete dataset (flush-newest-NODE.txt),
what `ckptfs agent --once --json` printed (flush-NODE.json), its exit status
(flush-NODE.rc; 124: stopped by the time bound), with object storage configured the
same of its drain (flush-s3-NODE.json, flush-s3-NODE.rc; 137: stopped by the time
bound), and the levels of the node's files after it (flush-levels-NODE.json, `ckptfs
status --json`). Prints one line per node (and one per node for object storage) and a
verdict: `flush: complete` when every complete file left in every node's memory is on
the PFS (and, configured, in object storage), else `flush: INCOMPLETE` naming the files
that are not.

    flush-report.py JOBDIR
"""
import glob
import json
import os
import sys


def human(n):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


STATES = {"0": "done", "124": "stopped by the time bound", "137": "stopped by the time bound"}


def main(jobdir):
    pat = os.path.join(jobdir, "flush-*.rc")
    nodes = sorted(os.path.basename(p)[len("flush-"):-len(".rc")] for p in glob.glob(pat)
                   if not os.path.basename(p).startswith("flush-s3-"))
    s3_nodes = {os.path.basename(p)[len("flush-s3-"):-len(".rc")]
                for p in glob.glob(os.path.join(jobdir, "flush-s3-*.rc"))}
    in_objects = 0
    if not nodes:
        print("flush: INCOMPLETE: no node reported (the flush step did not run)")
        return 1
    missing = []
    total = 0
    newest = set()
    for n in nodes:
        rc = read(os.path.join(jobdir, f"flush-{n}.rc"))
        summary = load(os.path.join(jobdir, f"flush-{n}.json")) or {}
        levels = (load(os.path.join(jobdir, f"flush-levels-{n}.json")) or {}).get("levels")
        name = read(os.path.join(jobdir, f"flush-newest-{n}.txt")) or "-"
        newest.add(name)
        state = STATES.get(rc, f"exit {rc}")
        if levels is None:
            missing.append(f"{n}: no levels (the node's store could not be read)")
            print(f"node {n}: {state}: levels unknown")
            continue
        left = sorted(p for p, w in levels.items() if w.get("local") and not w.get("pfs"))
        on = sum(1 for w in levels.values() if w.get("pfs"))
        total += on
        line = (f"node {n}: dataset {name}: {state}: {summary.get('drained_files', 0)} files "
                f"({human(summary.get('drained_bytes', 0))}) flushed now, {on} on the PFS")
        if left:
            line += f", NOT flushed: {' '.join(left)}"
            missing += [f"{n}:{p}" for p in left]
        for f in summary.get("failed", []):
            line += f"; failed {f.get('path')}: {f.get('error', '')}"
        print(line)
        if n in s3_nodes:
            missing += objects_line(jobdir, n, name, levels)
            in_objects += sum(1 for w in levels.values() if w.get("objects"))
    if len(newest) > 1:
        missing.append(f"nodes disagree on the newest complete dataset ({', '.join(sorted(newest))})")
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        where = "on the PFS" + (" or in object storage" if s3_nodes else "")
        print(f"flush: INCOMPLETE: {len(missing)} files not {where}: {shown}")
        return 1
    if newest == {"-"}:
        print("flush: complete: no complete dataset (nothing to flush)")
        return 0
    objects = f", {in_objects} in object storage" if s3_nodes else ""
    print(f"flush: complete: dataset {','.join(sorted(newest))}, {total} files of {len(nodes)} nodes on the PFS{objects}")
    return 0


def objects_line(jobdir, n, name, levels):
    """Print node n's object-storage line; return its files not in object storage."""
    rc = read(os.path.join(jobdir, f"flush-s3-{n}.rc"))
    summary = load(os.path.join(jobdir, f"flush-s3-{n}.json")) or {}
    state = STATES.get(rc, f"exit {rc}")
    level = summary.get("level") or "object storage"
    left = sorted(p for p, w in levels.items() if w.get("local") and not w.get("objects"))
    on = sum(1 for w in levels.values() if w.get("objects"))
    line = (f"node {n}: dataset {name}: {level}: {state}: {summary.get('drained_files', 0)} files "
            f"({human(summary.get('drained_bytes', 0))}) flushed now, {on} in object storage")
    if left:
        line += f", NOT flushed: {' '.join(left)}"
    for f in summary.get("failed", []):
        line += f"; failed {f.get('path')}: {f.get('error', '')}"
    if rc != "0" and not summary:
        err = read(os.path.join(jobdir, f"flush-s3-{n}.log")).splitlines()
        if err:
            line += f"; {err[-1]}"
    print(line)
    return [f"{n}:{p} (object storage)" for p in left]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

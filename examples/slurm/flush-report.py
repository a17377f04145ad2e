#!/usr/bin/env python3
"""The job-end flush report of examples/slurm/ckptfs-job.sh.

Per node, from the job directory: the newest complete dataset (flush-newest-NODE.txt),
what `ckptfs agent --once --json` printed (flush-NODE.json), its exit status
(flush-NODE.rc; 124: stopped by the time bound) and the levels of the node's files
after it (flush-levels-NODE.json, `ckptfs status --json`). Prints one line per node and
a verdict: `flush: complete` when every complete file left in every node's memory is on
the PFS, else `flush: INCOMPLETE` naming the files that are not.

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


def main(jobdir):
    pat = os.path.join(jobdir, "flush-*.rc")
    nodes = sorted(os.path.basename(p)[len("flush-"):-len(".rc")] for p in glob.glob(pat))
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
        state = {"0": "done", "124": "stopped by the time bound"}.get(rc, f"exit {rc}")
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
    if len(newest) > 1:
        missing.append(f"nodes disagree on the newest complete dataset ({', '.join(sorted(newest))})")
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        print(f"flush: INCOMPLETE: {len(missing)} files not on the PFS: {shown}")
        return 1
    if newest == {"-"}:
        print("flush: complete: no complete dataset (nothing to flush)")
        return 0
    print(f"flush: complete: dataset {','.join(sorted(newest))}, {total} files of {len(nodes)} nodes on the PFS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

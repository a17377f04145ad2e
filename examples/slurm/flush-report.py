#!/usr/bin/env python3
"""The job-end flush report of examples/slurm/ckptfs-job.sh.

Reads, per node, what `ckptfs agent --once --json` printed (flush-NODE.json), its exit
status (flush-NODE.rc; 124: stopped by the time bound) and the agent's last status
(flush-status-NODE.json: the files still queued or in flight when it stopped). Prints
one line per node and a closing line, `flush: complete` when every node drained every
complete file, else `flush: INCOMPLETE` with the files that did not reach the PFS.

    flush-report.py JOBDIR
"""
import glob
import json
import os
import sys


def human(n):
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024.0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(jobdir):
    nodes = sorted(os.path.basename(p)[len("flush-"):-len(".rc")] for p in glob.glob(os.path.join(jobdir, "flush-*.rc")))
    if not nodes:
        print("flush: INCOMPLETE: no node reported (the flush step did not run)")
        return 1
    missing = []
    total_files = total_bytes = 0
    for n in nodes:
        rc = open(os.path.join(jobdir, f"flush-{n}.rc")).read().strip()
        summary = load(os.path.join(jobdir, f"flush-{n}.json")) or {}
        status = load(os.path.join(jobdir, f"flush-status-{n}.json")) or {}
        files = summary.get("drained_files", 0)
        size = summary.get("drained_bytes", 0)
        total_files += files
        total_bytes += size
        left = [(q["path"], q["size"]) for q in status.get("queued", [])]
        left += [(q["path"], q["size"]) for q in status.get("in_flight", [])]
        failed = [(f["path"], f.get("error", "")) for f in summary.get("failed", [])]
        if rc == "124":
            state = "stopped by the time bound"
        elif rc == "0":
            state = "done"
        else:
            state = f"exit {rc}"
        line = f"node {n}: {state}: {files} files ({human(size)}) flushed, {summary.get('already_drained', 0)} already on the PFS"
        if rc != "0":
            # What the agent still had to do when it stopped.
            line += f"; not flushed: {len(left)} files ({human(sum(s for _, s in left))})"
            missing += [f"{n}:{p}" for p, _ in left]
            if not left and not summary:
                missing.append(f"{n}: no summary")
        for p, e in failed:
            line += f"; failed {p}: {e}"
            missing.append(f"{n}:{p}")
        print(line)
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        print(f"flush: INCOMPLETE: {len(missing)} files not on the PFS: {shown}")
        return 1
    print(f"flush: complete: {total_files} files ({human(total_bytes)}) from {len(nodes)} nodes on the PFS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

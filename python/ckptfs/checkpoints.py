"""Checkpoints in a node store, managed without torch: which one a restart takes
(:func:`latest_checkpoint`, :func:`is_complete`), what there is
(:func:`list_checkpoints`) and retention (:func:`delete_checkpoint`,
:func:`keep_last`). :mod:`ckptfs.torch` re-exports every public name; this module does
not import torch.

A checkpoint is a DCP directory (``.metadata`` and the ranks' shards). Each save through
``ckptfs.torch.Writer`` is one checkpoint **dataset** (:mod:`ckptfs.datasets`, named
after the directory). Checkpoints without dataset records (written with
``dataset=False``, or a store brought back without its records) are judged by the
directory rule (:func:`is_complete`).

In cluster mode (``CKPTFS_CLUSTER`` and ``CKPTFS_NODE_ID`` set) completeness is
job-wide: every node's records through the node daemons.

A checkpoint saved without the Writer (torch's fsspec writer through
``dcp.save(checkpoint_id="ckptfs://...")``, ``Writer(dataset=False)``) has no dataset
record: once records name checkpoints under the root, a restart takes the newest
recorded one, and every rank that asks is warned (``RuntimeWarning``) about each newer
unrecorded one, on every node: the node daemons are asked for such directories
(``.metadata`` only exists in the coordinator's node store).
"""

from __future__ import annotations

import json
import posixpath
import warnings
from typing import Any, List, Optional, Union

from . import Store, _native, _norm
from . import datasets as _ds

__all__ = [
    "latest_checkpoint",
    "is_complete",
    "list_checkpoints",
    "delete_checkpoint",
    "keep_last",
    "METADATA",
]

METADATA = ".metadata"

StoreLike = Union[None, str, Store]

_cluster = _ds._cluster
_store = _ds._store


# -- completeness ------------------------------------------------------------------------
def _dir_complete(store: Store, path: str) -> bool:
    """The directory rule: ``.metadata`` closed complete and no file in the directory
    being written, incomplete (dead writer) or failed."""
    try:
        if store.stat(posixpath.join(path, METADATA)).state != "complete":
            return False
        for name in store.listdir(path):
            st = store.stat(posixpath.join(path, name))
            if not st.is_dir() and st.state != "complete":
                return False
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def _dir_candidates(store: Store, root: str) -> List[str]:
    """Checkpoint directories under ``root`` (the root itself and its subdirectories)."""
    out = []
    if not store.isdir(root):
        return out
    for dirpath, _dirs, files in store.walk(root):
        if METADATA in files:
            out.append(dirpath)
    return out


def _latest_by_dir(store: Store, root: str) -> Optional[str]:
    best = None
    for p in _dir_candidates(store, root):
        if _dir_complete(store, p):
            key = (store.stat(posixpath.join(p, METADATA)).mtime_ns, p)
            if best is None or key > best:
                best = key
    return best[1] if best else None


def _under(name: str, root: str) -> bool:
    r = root.rstrip("/")
    return r == "" or name == r or name.startswith(r + "/")


def _datasets(store: Store, job: Optional[str], dests: Any = None, **kw: Any) -> "_ds.Datasets":
    return _ds.Datasets(store, job=job, dests=dests, **kw)


def is_complete(path: str, store: StoreLike = None, job: Optional[str] = None) -> bool:
    """Whether the DCP checkpoint at ``path`` can be loaded from this store: the newest
    dataset named ``path`` is complete and every one of its files is in the store with
    its recorded size and modification time (its ``local`` level; the CRC32C is checked
    by :func:`latest_checkpoint`); without a dataset record of that name, the directory
    rule (module docs)."""
    st = _store(store)
    p = _norm(path)
    ds = _datasets(st, job)
    mine = [d for d in ds.list() if d["name"] == p]
    if not mine:
        return _dir_complete(st, p)
    d = mine[-1]
    if d["state"] != "complete":
        return False
    return all("local" in f["levels"] for f in d["files"].values())


def latest_checkpoint(
    root: str = "/",
    store: StoreLike = None,
    job: Optional[str] = None,
    dests: Any = None,
    restore: bool = False,
) -> Optional[str]:
    """The newest checkpoint under ``root`` complete on some level: the newest dataset
    named ``root`` or below it that is complete in this store, in a drain destination
    (``dests``, default ``$CKPTFS_DEST``) or on a level of the settings' ``[levels]``
    read order (``CKPTFS_LEVELS``, e.g. object storage ``s3:bucket/prefix``); with
    ``restore`` the files the store lacks are brought back first (every chunk checked;
    a damaged copy passes over to the older checkpoint). When no dataset record names
    anything under ``root``, the
    newest directory passing the directory rule (by its ``.metadata`` time). None if
    there is none. In cluster mode the newest complete job-wide.

    Each newer checkpoint passed over is warned about (``RuntimeWarning``) with the
    reason: a dataset not complete, or a checkpoint saved without a dataset record."""
    st = _store(store)
    r = _norm(root)
    ds = _datasets(st, job, dests)
    if ds.cluster is not None and st.name == _native.cluster_store_name(*ds.cluster):
        chosen = _job_latest(ds, r)
        return chosen["name"] if chosen else None
    found = ds.restart_search(r, restore=restore)
    chosen = found["chosen"]
    for sk in found.get("skipped") or []:
        if chosen is None or sk["id"] > chosen["id"]:
            _warn(
                f"ckptfs: checkpoint {sk['name']} (dataset {sk['id']}) is newer than "
                f"{chosen['name'] if chosen else 'any chosen'} but was skipped: {sk['reason']}"
            )
    recs = ds.list()
    if chosen is None and not any(_under(d["name"], r) for d in recs):
        return _latest_by_dir(st, r)
    _warn_unrecorded(ds, r, chosen, recs)
    return chosen["name"] if chosen is not None else None


def _warn(msg: str) -> None:
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _all_files(d: dict) -> "dict[str, dict]":
    """A dataset's files: a record's ``files``, or every node's part of a job-wide one."""
    files = dict(d.get("files") or {})
    for part in (d.get("parts") or {}).values():
        files.update(part.get("files") or {})
    return files


def _metadata_time(d: Optional[dict]) -> int:
    """The ``.metadata`` time of dataset ``d`` (whichever node's part lists it), else its
    completion time; -1 for none (every checkpoint is newer)."""
    if d is None:
        return -1
    f = _all_files(d).get(posixpath.join(d["name"], METADATA))
    if f and f.get("mtime_ns"):
        return int(f["mtime_ns"])
    return int(d.get("closed_ns") or 0)


def _warn_unrecorded(ds: "_ds.Datasets", root: str, chosen: Optional[dict], datasets: List[dict]) -> None:
    """Warn about every checkpoint directory under ``root`` whose ``.metadata`` no
    dataset lists and is newer than the chosen one's: a save made without the Writer
    (``dcp.save(checkpoint_id="ckptfs://...")`` through torch's fsspec writer, or
    ``Writer(dataset=False)``) that a restart does not take. In cluster mode every node
    is asked through its daemon (``.metadata`` only exists in the coordinator's node
    store), so every rank on every node is warned."""
    c = ds.cluster
    try:
        got = json.loads(
            _native.unrecorded_checkpoints(ds.store._s, ds.job, root, c[0] if c else None, c[1] if c else None)
        )
    except OSError as e:
        _warn(f"ckptfs: could not look for checkpoints saved without a dataset record under {root}: {e}")
        return
    listed = {(p, int(f.get("mtime_ns") or 0)) for d in datasets for p, f in _all_files(d).items()}
    t0 = _metadata_time(chosen)
    told = set()
    for u in sorted(got["dirs"], key=lambda u: (-u["metadata_mtime_ns"], u["path"])):
        t = u["metadata_mtime_ns"]
        if t <= t0 or u["path"] in told or (posixpath.join(u["path"], METADATA), t) in listed:
            continue
        told.add(u["path"])
        where = f" (its .metadata is on node {u['node']})" if u["node"] else ""
        _warn(
            f"ckptfs: checkpoint {u['path']}{where} is newer than "
            f"{'the chosen ' + chosen['name'] if chosen else 'any chosen checkpoint'} but has no "
            "dataset record (saved without ckptfs.torch.Writer: dcp.save(checkpoint_id=\"ckptfs://...\") "
            "or Writer(dataset=False)): it is not chosen; load it with Reader(path=...), or save "
            "through the Writer"
        )


def _job_latest(ds: "_ds.Datasets", root: str) -> Optional[dict]:
    """Cluster mode: the newest dataset under ``root`` complete job-wide (every rank's
    part on every node); each newer one passed over is warned about with its reason, as
    is a newer checkpoint saved without a dataset record on any node."""
    all_jl = ds.job_list()
    jl = [d for d in all_jl if _under(d["name"], root)]
    chosen = None
    for d in reversed(jl):
        if d["state"] == "complete":
            chosen = d
            break
    for d in jl:
        if d["state"] != "complete" and (chosen is None or d["id"] > chosen["id"]):
            _warn(
                f"ckptfs: checkpoint {d['name']} (dataset {d['id']}) is newer than "
                f"{chosen['name'] if chosen else 'any complete one'} but is {d['state']} "
                f"job-wide: {d.get('reason') or ''}"
            )
    _warn_unrecorded(ds, root, chosen, all_jl)
    return chosen


# -- managing checkpoints ------------------------------------------------------------------
def _levels_all(files: "dict[str, dict]") -> List[str]:
    """Levels holding every file, by the ids the native side reports (``local``,
    ``partner`` or ``partner:NODE``, ``pfs`` or ``pfs:DIR``, ``s3:BUCKET/PREFIX``,
    ``erasure:setN``, ``pool:...``, and the id of any level added later), in the order of
    the first file's list (the read order: fastest first)."""
    if not files:
        return []
    lists = [list(f.get("levels") or []) for f in files.values()]
    out: List[str] = []
    for lv in lists[0]:
        if lv not in out and all(lv in other for other in lists):
            out.append(lv)
    return out


def list_checkpoints(root: str = "/", store: StoreLike = None, job: Optional[str] = None) -> List[dict]:
    """The checkpoints (datasets) named ``root`` or below, oldest first, one row per
    dataset: ``name id state reason size levels loadable evicted decision protection
    attempts``.

    ``state`` is the dataset's as the whole job sees it (cluster mode: every node's
    records through the daemons; a checkpoint is ``complete`` only when every rank's
    part on every node is), ``levels`` the levels holding every file now, by level id
    as the native side reports them (``local``, ``partner``, ``pfs``, and the ids of the
    settings' ``[levels]`` registry levels such as ``s3:bucket/prefix``; a level added
    later shows up without a change here), ``loadable`` whether it is complete and some level holds it
    all (an evicted checkpoint whose files are gone is not), ``decision`` the level
    policy's ``{"level", "reason"}``, ``protection`` what that choice gives the
    checkpoint beyond this node as ``dataset_partner_copies`` applies it (the same as
    ``ckptfs ls -l`` and ``ckpt list``: ``chosen`` levels, ``short``,
    ``node_local_by_choice``, ``note`` saying why; with ``dataset_partner_copies =
    decision`` a checkpoint decided ``local`` is node-local by that choice)."""
    st = _store(store)
    r = _norm(root)
    ds = _datasets(st, job)
    recs = {d["id"]: d for d in ds.list()}
    rows = []
    for d in ds.job_list():
        if not _under(d["name"], r):
            continue
        rec = recs.get(d["id"]) or {}
        files: "dict[str, dict]" = {}
        if ds.cluster is None:
            files = dict(rec.get("files") or {})  # levels as checked now
        else:  # every node's part, each node's levels as it checked them now
            for part in (d.get("parts") or {}).values():
                files.update(part.get("files") or {})
        levels = _levels_all(files)
        dec = rec.get("decision") or None
        rows.append(
            {
                "name": d["name"],
                "id": d["id"],
                "state": d["state"],
                "reason": d.get("reason"),
                "size": sum(int(f.get("size") or 0) for f in files.values()),
                "levels": levels,
                "loadable": d["state"] == "complete" and bool(levels),
                "evicted": bool(rec.get("evicted")),
                "decision": {"level": dec.get("level"), "reason": dec.get("reason")} if dec else None,
                "protection": ds.protection(rec) if rec else None,
            }
        )
    # One row per checkpoint name: a step saved again after a crash is its newest save
    # (``attempts`` counts the saves of that name).
    by_name: "dict[str, dict]" = {}
    for row in rows:
        prev = by_name.pop(row["name"], None)
        row["attempts"] = (prev["attempts"] if prev else 0) + 1
        by_name[row["name"]] = row
    return sorted(by_name.values(), key=lambda x: x["id"])


def _rm_empty_dirs(st: Store, path: str) -> None:
    """Remove ``path`` and its parents while they are empty directories."""
    p = path
    while p not in ("", "/"):
        try:
            if not st.isdir(p) or st.listdir(p):
                return
            st.rmdir(p)
        except OSError:
            return
        p = posixpath.dirname(p)


def delete_checkpoint(name: str, store: StoreLike = None, job: Optional[str] = None) -> int:
    """Delete checkpoint ``name`` from this node: every dataset of that name (its record
    and its files in this store still holding its content), then its directory and
    parents once empty. Returns the number of datasets deleted. In cluster mode each
    node keeps its own part: call it on every node (one rank per node)."""
    st = _store(store)
    p = _norm(name)
    ds = _datasets(st, job)
    n = 0
    for d in ds.list():
        if d["name"] == p:
            ds.delete(d["id"])
            n += 1
    _rm_empty_dirs(st, p)
    return n


def keep_last(n: int, root: str = "/", store: StoreLike = None, job: Optional[str] = None) -> List[str]:
    """Keep the newest ``n`` loadable checkpoints under ``root`` on this node and delete
    the others (older complete ones, and incomplete or invalid ones older than the
    oldest kept), directories included. Open (being written) checkpoints are left
    alone. Returns the names deleted."""
    if n < 1:
        raise ValueError("keep_last: n must be at least 1")
    rows = list_checkpoints(root, store, job)
    keep = [r for r in rows if r["loadable"]][-n:]
    if not keep:
        return []
    oldest_kept = keep[0]["id"]
    kept_names = {r["name"] for r in keep}
    gone = []
    for r in rows:
        if r["id"] >= oldest_kept or r["state"] == "open" or r["name"] in kept_names:
            continue
        delete_checkpoint(r["name"], store, job)
        gone.append(r["name"])
    return gone

"""Checkpoint datasets: a job's checkpoint as one unit, usable for a restart only when
every rank's part is complete (docs/datasets.md; the same API as ``ckptfs ckpt`` and the
C ABI's ``ckptfs_ckpt_begin``/``ckptfs_ckpt_complete``/``ckptfs_start_restart``).

>>> import ckptfs.datasets as cd
>>> ds = cd.Datasets("job42", job="train", rank=0, world=1)
>>> i = ds.begin("step100")            # files written from now on belong to it
>>> ...                                # write the checkpoint into store "job42"
>>> ds.complete(i)["state"]            # last part: checked, checksummed, complete
'complete'
>>> ds.latest_restartable()["name"]    # newest dataset complete on some level
'step100'

Module-level functions act on a :class:`Datasets` made from their keyword arguments
(``store``, ``job``, ``rank``, ``world``, ``dests``): ``begin``, ``complete``,
``list``, ``show``, ``delete``, ``latest_restartable``. Records are dicts in the record
format of docs/datasets.md (``id name job state reason parts files decision ...``).
Errors are :class:`OSError` with the errno: ``FileNotFoundError`` (ENOENT: never begun
by this rank), ``errno.EALREADY`` (completed already, or given up), ``EINVAL``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import Store, _native

__all__ = ["Datasets", "begin", "complete", "list", "show", "delete", "latest_restartable"]

StoreLike = Union[None, str, Store]
Record = Dict[str, Any]


def _cluster() -> Optional["tuple[str, str]"]:
    """``(cluster file, node)`` when ``CKPTFS_CLUSTER`` and ``CKPTFS_NODE_ID`` are set
    (what ``ckptfs run --cluster`` sets; torchrun users export them per node)."""
    f = os.environ.get("CKPTFS_CLUSTER", "").strip()
    n = os.environ.get("CKPTFS_NODE_ID", "").strip()
    return (f, n) if f and n else None


def _store(store: StoreLike) -> Store:
    """``store`` as a Store; None: this node's store in cluster mode (the cluster file
    names it; a store not created yet gets the file's ``mem_size``, ``cluster init
    --mem``, unless ``CKPTFS_MEM_SIZE`` or the settings file gives one), else the
    settings' default store."""
    if isinstance(store, Store):
        return store
    if not store:
        c = _cluster()
        if c is not None:
            name, mem = _native.cluster_store(*c)
            if mem is None:
                return Store(name, create=True)
            try:  # an existing store as it is (its daemon may have been given another size)
                return Store(name, create=False)
            except FileNotFoundError:
                return Store(name, create=True, mem_size=mem)
    return Store(store or None, create=True)


class Datasets:
    """The datasets of job ``job`` in a node store, as rank ``rank`` of ``world`` ranks
    writing into that store.

    ``store``: a :class:`ckptfs.Store`, a store name, or None (the settings' default).
    ``job`` (default ``$CKPTFS_JOB``, else ``"default"``), ``rank`` (default
    ``$CKPTFS_RANK`` or the launcher's, else ``"0"``), ``world`` (default
    ``$CKPTFS_NRANKS``/``OMPI_COMM_WORLD_SIZE``/``PMI_SIZE``, else 1), ``dests``: the
    drain destinations a restart may restore from (default ``$CKPTFS_DEST``), ``node``
    (default ``$CKPTFS_NODE_ID``, else the host name), ``config``: a settings file.
    """

    def __init__(
        self,
        store: StoreLike = None,
        *,
        job: Optional[str] = None,
        rank: Union[None, int, str] = None,
        world: Optional[int] = None,
        dests: Optional[Sequence[Union[str, os.PathLike]]] = None,
        node: Optional[str] = None,
        config: Union[None, str, os.PathLike] = None,
    ) -> None:
        self.store = _store(store)
        self._d = _native.Datasets(
            self.store._s,
            job,
            None if rank is None else str(rank),
            world,
            None if dests is None else [os.fspath(d) for d in dests],
            node,
            None if config is None else os.fspath(config),
        )

    @property
    def job(self) -> str:
        return self._d.job

    @property
    def rank(self) -> str:
        return self._d.rank

    @property
    def world(self) -> int:
        return self._d.world

    @property
    def dests(self) -> List[str]:
        return self._d.dests

    @property
    def cluster(self) -> "Optional[tuple[str, str]]":
        """``(cluster file, node)`` in cluster mode (``CKPTFS_CLUSTER`` and
        ``CKPTFS_NODE_ID`` set: completeness, ids and restarts are job-wide, the other
        nodes' daemons are asked), else None."""
        return self._d.cluster

    def job_list(self) -> List[Record]:
        """Every dataset as the whole job sees it, oldest first: in cluster mode every
        node's records (through its daemon) judged job-wide (``state`` complete only
        when every rank's part on every node is; ``parts``: node -> ``{"ranks",
        "files"}``; ``unreachable``: nodes that could not be asked); on one node this
        store's records in the same form."""
        out = json.loads(self._d.job_list())
        for r in out:
            st = r.get("state")
            if isinstance(st, dict):  # {"state": ..., "reason": ...}
                r["state"], r["reason"] = st.get("state"), st.get("reason")
        return out

    def begin(self, name: str) -> int:
        """Begin dataset ``name`` for this rank (joining an open one of that name that
        another rank began); returns its id. This process is recorded as the rank: if it
        dies before :meth:`complete`, the dataset becomes incomplete."""
        return self._d.begin(name)

    def complete(self, id: Optional[int] = None, valid: bool = True) -> Record:
        """Complete this rank's part of dataset ``id`` (None: its newest open one). The
        rank's files are the store files modified since its :meth:`begin`. When the last
        part is in, every file must be closed complete; each is checksummed (CRC32C) and
        the dataset becomes ``complete``. Returns the record."""
        return json.loads(self._d.complete(id, valid))

    def list(self) -> List[Record]:
        """Every dataset of the job, oldest first (``ckptfs ckpt list``); each file's
        ``levels`` say where it is now (``local``, ``pfs``, and the ids of the settings'
        ``[levels]`` registry levels holding it, e.g. ``s3:bucket/prefix``)."""
        return json.loads(self._d.list())

    def protection(self, record: Record) -> Record:
        """The protection ``record`` gets beyond this node: the level policy's choice as
        ``dataset_partner_copies`` applies it (what ``ckptfs ls -l`` and ``ckpt list``
        show): ``{"chosen": ["local", "partner"], "short": "partner", "policy": {"level",
        "reason"}, "node_local_by_choice": False, "partner_copies": "complete", "note":
        ...}``; in cluster mode under a cluster file whose ``[redundancy]`` names an
        erasure scheme, the erasure set's (``"partner_copies": "erasure"``), as the CLI
        says."""
        return json.loads(self._d.protection(json.dumps(record)))

    def show(self, id: int) -> Record:
        """One dataset's record (``FileNotFoundError`` if there is none)."""
        return json.loads(self._d.show(id))

    def delete(self, id: int) -> None:
        """Delete dataset ``id``: its record and its local files still holding its
        content."""
        self._d.delete(id)

    def latest_restartable(self, prefix: Optional[str] = None, restore: bool = True) -> Optional[Record]:
        """The newest dataset complete on some level (this store, or a drain
        destination's manifest with the same size and CRC32C), among those named
        ``prefix`` or below it (None: all). With ``restore``, its files that only the
        PFS holds are first brought back into the store, CRC-checked (a dataset whose
        restore fails is passed over). None when there is no such dataset.
        :meth:`restart_search` gives the files restored and the datasets passed over."""
        return self.restart_search(prefix, restore)["chosen"]

    def restart_search(self, prefix: Optional[str] = None, restore: bool = True) -> Dict[str, Any]:
        """As :meth:`latest_restartable`, with the details: ``{"chosen": record or None,
        "restored": [[path, bytes], ...], "skipped": [{"id", "name", "reason"}, ...]}``."""
        return json.loads(self._d.latest_restartable(prefix, restore))

    def __repr__(self) -> str:
        return f"<ckptfs.datasets.Datasets job={self.job!r} rank={self.rank!r} world={self.world} store={self.store.name!r}>"


def begin(name: str, store: StoreLike = None, **ident: Any) -> int:
    """:meth:`Datasets.begin` on ``Datasets(store, **ident)``."""
    return Datasets(store, **ident).begin(name)


def complete(id: Optional[int] = None, valid: bool = True, store: StoreLike = None, **ident: Any) -> Record:
    """:meth:`Datasets.complete` on ``Datasets(store, **ident)``."""
    return Datasets(store, **ident).complete(id, valid)


def list(store: StoreLike = None, **ident: Any) -> List[Record]:  # noqa: A001 (the API's name)
    """:meth:`Datasets.list` on ``Datasets(store, **ident)``."""
    return Datasets(store, **ident).list()


def show(id: int, store: StoreLike = None, **ident: Any) -> Record:
    """:meth:`Datasets.show` on ``Datasets(store, **ident)``."""
    return Datasets(store, **ident).show(id)


def delete(id: int, store: StoreLike = None, **ident: Any) -> None:
    """:meth:`Datasets.delete` on ``Datasets(store, **ident)``."""
    Datasets(store, **ident).delete(id)


def latest_restartable(
    store: StoreLike = None, prefix: Optional[str] = None, restore: bool = True, **ident: Any
) -> Optional[Record]:
    """:meth:`Datasets.latest_restartable` on ``Datasets(store, **ident)``."""
    return Datasets(store, **ident).latest_restartable(prefix, restore)

"""PyTorch on ckptfs: a ``torch.distributed.checkpoint`` storage writer and reader, and
``torch.save``/``torch.load`` helpers.

>>> import torch.distributed.checkpoint as dcp, ckptfs.torch as ct
>>> dcp.save(state, storage_writer=ct.Writer(store="job", path="/run1/step100"))
>>> dcp.load(state, storage_reader=ct.Reader(store="job", root="/run1"))  # latest complete

Each rank writes its shards (``__RANK_N.distcp``) straight into the node store (a memory
copy, no file system); the coordinator writes ``.metadata`` last (as ``.metadata.tmp``,
closed, then renamed). Each save is one checkpoint **dataset** (:mod:`ckptfs.datasets`,
named after the checkpoint directory): every rank begins its part at its first write
and completes it when its shards are closed; the coordinator completes its part after
``.metadata`` is in place, which (all other parts being in) makes the dataset complete:
its files checked closed complete and checksummed. :func:`latest_checkpoint` and
``Reader()`` without a path take the newest dataset complete on any level (this store,
or the PFS through the drain manifests: files only the PFS holds are restored first).

Checkpoints without dataset records (written with ``dataset=False``, or a store brought
back from partners or the PFS without its records) are judged by the directory rule,
:func:`is_complete`: ``.metadata`` present and closed complete, and no file in the
directory being written or left incomplete by a dead writer.

Managing checkpoints (:func:`latest_checkpoint`, :func:`is_complete`,
:func:`list_checkpoints`, :func:`delete_checkpoint`, :func:`keep_last`) lives in
:mod:`ckptfs.checkpoints` (no torch needed there); the names are importable from here.

GPU tensors: DCP's planner hands CPU tensors to the writer after copying GPU tensors to
host once (``per_thread_copy_ahead``); the writer then copies host memory into the store.
"""

from __future__ import annotations

import io
import os
import posixpath
import threading
from contextlib import contextmanager
from typing import Any, Generator, List, Optional, Union

import torch
from torch.distributed.checkpoint.filesystem import FileSystemBase, FileSystemReader, FileSystemWriter

from . import Store, _native, _norm
from . import datasets as _ds
from .checkpoints import (  # the management functions, public names of this module too
    METADATA,
    StoreLike,
    _cluster,
    _job_latest,
    _store,
    delete_checkpoint,
    is_complete,
    keep_last,
    latest_checkpoint,
    list_checkpoints,
)

__all__ = [
    "Writer",
    "Reader",
    "StorageWriter",
    "StorageReader",
    "save",
    "load",
    "save_safetensors",
    "load_safetensors",
    "latest_checkpoint",
    "is_complete",
    "list_checkpoints",
    "delete_checkpoint",
    "keep_last",
]

class _StoreFileSystem(FileSystemBase):
    """DCP's file-system interface over a node store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @contextmanager
    def create_stream(self, path: Union[str, os.PathLike], mode: str) -> Generator[io.IOBase, None, None]:
        p = _norm(path)
        if "r" not in mode:
            self.store.makedirs(posixpath.dirname(p), exist_ok=True)
        with self.store.open(p, mode if "b" in mode else mode + "b") as f:
            yield f

    def concat_path(self, path: Union[str, os.PathLike], suffix: str) -> str:
        return posixpath.join(_norm(path), suffix)

    def rename(self, path: Union[str, os.PathLike], new_path: Union[str, os.PathLike]) -> None:
        self.store.rename(_norm(path), _norm(new_path))

    def init_path(self, path: Union[str, os.PathLike]) -> str:
        return _norm(path)

    def mkdir(self, path: Union[str, os.PathLike]) -> None:
        self.store.makedirs(_norm(path), exist_ok=True)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return str(checkpoint_id).startswith("ckptfs://")

    def exists(self, path: Union[str, os.PathLike]) -> bool:
        return self.store.exists(_norm(path))

    def rm_file(self, path: Union[str, os.PathLike]) -> None:
        self.store.remove(_norm(path))

    def ls(self, path: Union[str, os.PathLike]) -> List[str]:
        p = _norm(path)
        return [posixpath.join(p, n) for n in self.store.listdir(p)]


def _strip_url(path: Union[str, os.PathLike]) -> str:
    s = os.fspath(path)
    if s.startswith("ckptfs://"):
        rest = s[len("ckptfs://"):]
        s = rest if rest.startswith("/") else "/" + rest.partition("/")[2]
    return _norm(s)


_crc_lock = threading.Lock()
_crc_off = 0
_crc_saved: Any = None


@contextmanager
def _no_zip_crc32(enabled: bool) -> Generator[None, None, None]:
    """Turn off torch.save's zip CRC32 (``torch.utils.serialization.config.save.
    compute_crc32``) while ckptfs writers write (process-wide, reference counted across
    threads). It is a second full pass over every tensor's bytes (measured: 5x the
    copy into the store); the store checksums the same bytes (CRC32C per chunk, computed
    during the copy) and torch.load reads such files."""
    global _crc_off, _crc_saved
    try:
        from torch.utils.serialization import config
    except ImportError:  # older torch: no such setting
        enabled = False
    if not enabled:
        yield
        return
    with _crc_lock:
        if _crc_off == 0:
            _crc_saved = config.save.compute_crc32
            config.save.compute_crc32 = False
        _crc_off += 1
    try:
        yield
    finally:
        with _crc_lock:
            _crc_off -= 1
            if _crc_off == 0:
                config.save.compute_crc32 = _crc_saved


# -- room in the store ----------------------------------------------------------------
def _fmt(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def _free_bytes(store: Store) -> "tuple[int, str]":
    """Free bytes in the store (memory and spill) and a description of its size."""
    i = store.info()
    cs = int(i["chunk_size"])
    free = (int(i["mem_free_chunks"]) + int(i.get("spill_free_chunks") or 0)) * cs
    size = f"{_fmt(int(i['mem_size']))} memory"
    if int(i.get("spill_size") or 0):
        size += f" + {_fmt(int(i['spill_size']))} spill"
    return free, size


def _no_space(store: Store, need: int, what: str, free: Optional[int] = None) -> OSError:
    f, size = _free_bytes(store)
    free = f if free is None else free
    return OSError(
        28,
        f"no space in ckptfs store {store.name} ({size}, {_fmt(free)} free): {what} needs about {_fmt(need)}",
    )


def _existing_bytes(store: Store, path: str) -> int:
    """Bytes of the files already under ``path`` (a save replacing them frees them)."""
    n = 0
    try:
        for dirpath, _d, files in store.walk(path):
            for f in files:
                try:
                    n += store.stat(posixpath.join(dirpath, f)).size
                except OSError:
                    pass
    except OSError:
        pass
    return n


def _check_room(store: Store, need: int, what: str, replaced: int = 0) -> None:
    """``OSError(ENOSPC)`` naming the store, its size and what the save needs, before
    a byte is written, when the store cannot take ``need`` bytes (``replaced``: bytes of
    files the save replaces). A chunk per file of slack is not counted: the check only
    refuses saves that cannot fit."""
    free, _ = _free_bytes(store)
    if need > free + replaced:
        raise _no_space(store, need, what, free)


def _store_full(store: Store) -> bool:
    try:
        i = store.info()
        return int(i["mem_free_chunks"]) + int(i.get("spill_free_chunks") or 0) == 0
    except Exception:  # noqa: BLE001 (best effort while reporting another error)
        return False


def _plan_bytes(plan: Any) -> int:
    """Bytes of the tensors in a DCP save plan (items without tensor data count 0)."""
    n = 0
    for item in getattr(plan, "items", []) or []:
        td = getattr(item, "tensor_data", None)
        if td is None:
            continue
        numel = 1
        for s in td.chunk.sizes:
            numel *= int(s)
        dtype = getattr(td.properties, "dtype", None)
        n += numel * (torch.empty((), dtype=dtype).element_size() if dtype is not None else 4)
    return n


def _obj_bytes(obj: Any, seen: Optional[set] = None) -> int:
    """Bytes of the tensors reachable through dicts, lists and tuples of ``obj``."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.untyped_storage().nbytes()) if obj.device.type == "cpu" else id(obj)
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_obj_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_obj_bytes(v, seen) for v in obj)
    return 0


# -- async_save staging into reused buffers ----------------------------------------------
def _signature(obj: Any, path: str = "") -> Any:
    """The structure of a state dict: every tensor's place, shape, dtype and device, and
    every other value's place and type (two dicts with one signature can share staging
    buffers)."""
    if isinstance(obj, torch.Tensor):
        return ("T", path, tuple(obj.shape), str(obj.dtype), obj.device.type, obj.is_contiguous())
    if isinstance(obj, dict):
        return ("D", path, tuple(_signature(v, f"{path}.{k}") for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return ("L", path, type(obj).__name__, tuple(_signature(v, f"{path}[{i}]") for i, v in enumerate(obj)))
    return ("V", path, type(obj).__name__)


class _StagingPool:
    """Process-wide staging buffers for ``dcp.async_save`` through :class:`Writer`:
    CPU copies of a state dict, allocated once per state-dict structure and reused by
    every later save of the same structure (each save makes a new Writer, so the
    buffers cannot live in the writer as torch's ``cache_staged_state_dict`` keeps them).
    A buffer set is lent to one save from its staging to the end of its
    ``write_data`` (the shards are in the store then); a save staged while the previous
    one is still writing gets a second set instead of overwriting the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: "dict[Any, List[Any]]" = {}

    def take(self, sig: Any) -> Any:
        with self.lock:
            sets = self.free.get(sig)
            return sets.pop() if sets else None

    def give(self, sig: Any, staged: Any) -> None:
        with self.lock:
            self.free.setdefault(sig, []).append(staged)

    def clear(self) -> None:
        with self.lock:
            self.free.clear()


_staging = _StagingPool()


def release_staging_buffers() -> None:
    """Drop the staging buffers ``dcp.async_save`` through :class:`Writer` keeps for
    reuse (memory the size of the state dict per structure saved)."""
    _staging.clear()


def _dist_rank_world() -> "tuple[int, int]":
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Writer(FileSystemWriter):
    """``StorageWriter`` for ``dcp.save``/``dcp.async_save`` into a node store.

    ``store``: a :class:`ckptfs.Store`, a store name, or None for the settings' default
    store. ``path``: the checkpoint directory in the store (a ``checkpoint_id`` given to
    ``dcp.save`` replaces it). Other keyword arguments go to ``FileSystemWriter``
    (``thread_count``, ``single_file_per_rank``, ...); ``sync_files`` defaults to False:
    data is in the store when written, there is nothing to fsync.

    Datasets: each save is one dataset named after the checkpoint directory (module
    docs). ``dataset=False`` turns that off. ``job``: the dataset job (default
    ``$CKPTFS_JOB``); ``dataset_world``: the ranks writing into this store (default
    ``$LOCAL_WORLD_SIZE``, else the process group's size, else 1); the rank is the
    process group's. After a save, ``writer.dataset`` is the coordinator's record of it
    (None on other ranks or with ``dataset=False``).

    ``complete_in_background``: the coordinator's completion (which checks every file
    closed complete and records its CRC32C, combined from the store's per-chunk CRCs
    without reading the data) runs on a thread, so ``dcp.save`` returns once the data
    and ``.metadata`` are in the store; the dataset is complete (and chosen for a
    restart) when ``writer.wait()`` returns. A process that dies before
    leaves the dataset incomplete, never a checkpoint chosen unverified.
    ``zip_crc32``: keep torch.save's zip CRC32 while writing (off by default: see
    :func:`_no_zip_crc32`).
    """

    def __init__(
        self,
        store: StoreLike = None,
        path: Union[str, os.PathLike] = "/",
        *,
        dataset: bool = True,
        job: Optional[str] = None,
        dataset_world: Optional[int] = None,
        complete_in_background: bool = False,
        zip_crc32: bool = False,
        stage_buffers: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("sync_files", False)
        super().__init__(path="/", **kwargs)
        self.store = _store(store)
        self.fs = _StoreFileSystem(self.store)
        self.path = _strip_url(path)
        self.use_dataset = dataset
        self.job = job
        self.dataset_world = dataset_world
        self.complete_in_background = complete_in_background
        self.zip_crc32 = zip_crc32
        self._dataset: Optional[dict] = None
        self._completer: Optional[threading.Thread] = None
        self._complete_error: Optional[BaseException] = None
        self._coordinator = True
        self._ds: Optional[_ds.Datasets] = None
        self._ds_id: Optional[int] = None
        self.stage_buffers = stage_buffers
        self._lent: Any = None

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        self.wait()
        super().reset(_strip_url(checkpoint_id) if checkpoint_id else None)
        self._dataset = None
        self._ds_id = None

    def wait(self, timeout: Optional[float] = None) -> Optional[dict]:
        """Wait for a completion running in the background (``complete_in_background``)
        and return the dataset record (None on non-coordinator ranks or without a
        dataset). Re-raises the completion's error."""
        t = self._completer
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                raise TimeoutError(f"checkpoint {self.path}: dataset completion still running")
            self._completer = None
        if self._complete_error is not None:
            e, self._complete_error = self._complete_error, None
            raise e
        return self._dataset

    @property
    def dataset(self) -> Optional[dict]:
        """The coordinator's record of the last save's dataset (waits for a background
        completion); None on other ranks or with ``dataset=False``."""
        return self.wait()

    def stage(self, state_dict: Any) -> Any:
        """``dcp.async_save``'s staging: copy the state dict into CPU buffers reused
        from earlier saves of the same structure (allocated at the first one), so an
        async save blocks for the copy only, as long as a sync save's copy into the
        store. ``stage_buffers=False`` allocates new buffers every time (torch's
        ``BlockingAsyncStager``)."""
        if not self.stage_buffers:
            return super().stage(state_dict)
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        sig = _signature(state_dict)
        staged = _staging.take(sig)
        if staged is None:
            staged = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
        staged = _copy_state_dict(state_dict, staged)
        self._lent = (sig, staged)
        return staged

    def _give_back(self) -> None:
        lent, self._lent = self._lent, None
        if lent is not None:
            _staging.give(*lent)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self._coordinator = is_coordinator

    def _begin(self) -> None:
        rank, world = _dist_rank_world()
        if self.dataset_world is not None:
            world = self.dataset_world
        elif _cluster() is None and os.environ.get("LOCAL_WORLD_SIZE", "").isdigit():
            # One node's store: the ranks writing into it. In cluster mode every rank
            # of the job has a part (job-wide completion across the nodes' records).
            world = int(os.environ["LOCAL_WORLD_SIZE"])
        self._ds = _ds.Datasets(self.store, job=self.job, rank=rank, world=world)
        self._ds_id = self._ds.begin(str(self.path))

    def _complete(self, valid: bool) -> Optional[dict]:
        if self._ds is None or self._ds_id is None:
            return None
        i, self._ds_id = self._ds_id, None
        return self._ds.complete(i, valid)

    def write_data(self, plan: Any, planner: Any) -> Any:
        rank = _dist_rank_world()[0]
        need = _plan_bytes(plan)
        what = f"checkpoint {self.path} (rank {rank}'s shards)"
        # A full store is reported as such before torch's writer sees a short write (it
        # would report a zip position error instead).
        try:
            _check_room(self.store, need, what, _existing_bytes(self.store, str(self.path)))
            if self.use_dataset:
                self._begin()
        except BaseException:
            self._give_back()
            raise
        try:
            with _no_zip_crc32(not self.zip_crc32):
                fut = super().write_data(plan, planner)  # written when it returns (FileSystemWriter)
            self._give_back()  # the shards are in the store: the staging buffers are free
        except BaseException as e:
            self._give_back()
            self._complete(False)
            if not (isinstance(e, OSError) and e.errno == 28) and _store_full(self.store):
                raise _no_space(self.store, need, what) from e
            raise
        if not self._coordinator:
            self._complete(True)
        return fut

    def finish(self, metadata: Any, results: Any) -> None:
        try:
            super().finish(metadata, results)
        except BaseException:
            self._complete(False)
            raise
        if self.complete_in_background and self._ds_id is not None:
            self._completer = threading.Thread(target=self._complete_checked, name="ckptfs-dataset-complete")
            self._completer.start()
        else:
            self._complete_checked()
            self.wait()

    def _complete_checked(self) -> None:
        try:
            d = self._complete(True)
            if d is not None:
                self._dataset = d
                if d["state"] in ("incomplete", "invalid"):
                    raise OSError(
                        5, f"checkpoint {self.path}: dataset {d['id']} is {d['state']}: {d.get('reason') or ''}"
                    )
        except BaseException as e:  # handed to wait()
            self._complete_error = e

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return _StoreFileSystem.validate_checkpoint_id(checkpoint_id)


class _JobFileSystem(_StoreFileSystem):
    """Cluster mode: DCP's file-system interface over this node's store and the other
    nodes' files of one checkpoint. A file of another node's part (the coordinator's
    ``.metadata``, other ranks' shards), or one of this node's part the store no longer
    has whole, is read through the node daemons (``ckptfs._native.read_job_file``: a
    partner copy in this store, the owner's daemon, the owner's partners, any other
    node), checked against the CRC32C the dataset recorded, and kept in memory for the
    rest of the load."""

    def __init__(self, store: Store, cluster: "tuple[str, str]", files: "dict[str, tuple[str, int, int, int]]") -> None:
        super().__init__(store)
        self.cluster = cluster
        self.files = files  # path -> (owner node, size, crc32c, mtime_ns)
        self.fetched: "dict[str, bytes]" = {}
        self.sources: "dict[str, str]" = {}  # path -> node it was read from

    def _local(self, p: str) -> bool:
        f = self.files.get(p)
        if f is None:
            return True
        owner, size, _crc, mtime = f
        if owner != self.cluster[1]:
            return False
        try:
            st = self.store.stat(p)
        except OSError:
            return False
        return st.state == "complete" and st.size == size and st.mtime_ns == mtime

    def fetch(self, p: str) -> bytes:
        b = self.fetched.get(p)
        if b is None:
            owner, size, crc, _ = self.files[p]
            node, b = _native.read_job_file(self.store._s, self.cluster[0], self.cluster[1], owner, p, size, crc)
            self.fetched[p] = b
            self.sources[p] = node
        return b

    @contextmanager
    def create_stream(self, path: Union[str, os.PathLike], mode: str) -> Generator[io.IOBase, None, None]:
        p = _norm(path)
        if "r" in mode and "+" not in mode and not self._local(p):
            yield io.BytesIO(self.fetch(p))
            return
        with super().create_stream(path, mode) as f:
            yield f

    def exists(self, path: Union[str, os.PathLike]) -> bool:
        return _norm(path) in self.files or super().exists(path)


def _job_files(d: dict) -> "dict[str, tuple[str, int, int, int]]":
    """Every file of job-wide dataset ``d``: path -> (node whose part it is, size,
    CRC32C, mtime_ns)."""
    out = {}
    for node, part in (d.get("parts") or {}).items():
        for path, f in (part.get("files") or {}).items():
            out[path] = (node, int(f["size"]), int(f["crc32c"]), int(f.get("mtime_ns") or 0))
    return out


class Reader(FileSystemReader):
    """``StorageReader`` for ``dcp.load`` from a node store.

    ``path``: the checkpoint directory. Without it, the newest checkpoint under ``root``
    (default "/") complete on any level (:func:`latest_checkpoint` with ``restore``:
    files the store lacks are brought back into it first, from ``dests``, default
    ``$CKPTFS_DEST``, or from the levels of the settings' ``[levels]`` read order,
    ``CKPTFS_LEVELS``, such as object storage); ``FileNotFoundError`` if there is none.
    The chosen
    directory is ``reader.path``. ``job``: the dataset job (default ``$CKPTFS_JOB``).
    """

    def __init__(
        self,
        store: StoreLike = None,
        path: Union[str, os.PathLike, None] = None,
        root: Union[str, os.PathLike] = "/",
        *,
        job: Optional[str] = None,
        dests: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(path="/", **kwargs)
        self.store = _store(store)
        self.fs = _StoreFileSystem(self.store)
        self.dataset: Optional[dict] = None
        c = _cluster()
        if c is not None and self.store.name == _native.cluster_store_name(*c):
            self._init_cluster(c, path, root, job, dests)
            return
        if path is None:
            r = _strip_url(root)
            found = latest_checkpoint(r, self.store, job=job, dests=dests, restore=True)
            if found is None:
                raise FileNotFoundError(2, f"no complete checkpoint under {r} in store {self.store.name}")
            self.path = found
        else:
            self.path = _strip_url(path)

    def _init_cluster(self, c: "tuple[str, str]", path: Any, root: Any, job: Optional[str], dests: Any) -> None:
        """Cluster mode: the checkpoint as the whole job sees it (every node's records
        through the daemons): ``path``'s newest dataset complete job-wide, or without
        ``path`` the newest under ``root``; files this node's store lacks are read from
        the nodes that hold them (:class:`_JobFileSystem`)."""
        ds = _ds.Datasets(self.store, job=job, dests=dests)
        if path is None:
            r = _strip_url(root)
            d = _job_latest(ds, r)
            if d is None:
                raise FileNotFoundError(2, f"no checkpoint under {r} is complete job-wide (node {c[1]}, job {ds.job})")
        else:
            p = _strip_url(path)
            mine = [x for x in ds.job_list() if x["name"] == p]
            done = [x for x in mine if x["state"] == "complete"]
            if not done:
                if mine:
                    x = mine[-1]
                    raise FileNotFoundError(
                        2, f"checkpoint {p} is {x['state']} job-wide, not loadable: {x.get('reason') or ''}"
                    )
                # No dataset of that name on any node: this store's directory as is.
                self.path = p
                return
            d = done[-1]
        self.path = d["name"]
        self.dataset = d
        self.fs = _JobFileSystem(self.store, c, _job_files(d))

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        super().reset(_strip_url(checkpoint_id) if checkpoint_id else None)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return _StoreFileSystem.validate_checkpoint_id(checkpoint_id)


# Aliases with torch's own names.
StorageWriter = Writer
StorageReader = Reader


def save(obj: Any, path: Union[str, os.PathLike], store: StoreLike = None, **kwargs: Any) -> None:
    """``torch.save(obj, ...)`` into the store file ``path`` (same format: ``torch.load``
    of the file's bytes works anywhere). Missing parent directories are created; the file
    is complete when this returns."""
    st = _store(store)
    p = _strip_url(path)
    need = _obj_bytes(obj)
    replaced = st.stat(p).size if st.exists(p) else 0
    _check_room(st, need, f"torch.save of {p}", replaced)
    st.makedirs(posixpath.dirname(p), exist_ok=True)
    try:
        with st.open(p, "wb") as f:
            torch.save(obj, f, **kwargs)
    except BaseException as e:
        if not (isinstance(e, OSError) and e.errno == 28) and _store_full(st):
            raise _no_space(st, need, f"torch.save of {p}") from e
        raise


def load(path: Union[str, os.PathLike], store: StoreLike = None, **kwargs: Any) -> Any:
    """``torch.load`` of the store file ``path`` (keyword arguments as for torch.load,
    e.g. ``map_location``, ``weights_only``)."""
    st = _store(store)
    with st.open(_strip_url(path), "rb") as f:
        return torch.load(f, **kwargs)


# -- safetensors ---------------------------------------------------------------------------
_ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_ST_FROM = {v: k for k, v in _ST_DTYPES.items()}


def save_safetensors(
    tensors: "dict[str, torch.Tensor]",
    path: Union[str, os.PathLike],
    store: StoreLike = None,
    metadata: "Optional[dict[str, str]]" = None,
) -> None:
    """Write ``tensors`` (name -> CPU tensor) as a safetensors file into the store: the
    header, then each tensor's bytes copied once, straight from the tensor's memory into
    the store (no serialised copy in between). Readable by ``safetensors.torch.load``."""
    import json

    header: "dict[str, Any]" = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    items = []
    off = 0
    for name, t in tensors.items():
        if t.dtype not in _ST_DTYPES:
            raise ValueError(f"safetensors: unsupported dtype {t.dtype} for {name!r}")
        if t.device.type != "cpu":
            raise ValueError(f"safetensors: {name!r} is on {t.device}; copy it to host first")
        t = t.detach().contiguous()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        items.append(t)
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    st = _store(store)
    p = _strip_url(path)
    st.makedirs(posixpath.dirname(p), exist_ok=True)
    with st.open(p, "wb", buffering=0) as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for t in items:
            if t.numel():
                f.write(t)


def load_safetensors(path: Union[str, os.PathLike], store: StoreLike = None) -> "dict[str, torch.Tensor]":
    """Read a safetensors file from the store: each tensor is allocated once and filled
    in place from the store (``read_into``)."""
    import json

    st = _store(store)
    p = _strip_url(path)
    with st.open(p, "rb", buffering=0) as f:
        size = f.size()
        n8 = bytearray(8)
        if f.readinto(n8) != 8:
            raise OSError(22, f"{p}: not a safetensors file (too short)")
        hlen = int.from_bytes(n8, "little")
        if hlen > size - 8:
            raise OSError(22, f"{p}: not a safetensors file (header length {hlen})")
        hb = bytearray(hlen)
        f.readinto(hb)
        try:
            header = json.loads(bytes(hb))
        except ValueError as e:
            raise OSError(22, f"{p}: bad safetensors header: {e}") from None
        base = 8 + hlen
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = _ST_FROM.get(info.get("dtype"))
            if dtype is None:
                raise OSError(22, f"{p}: unsupported dtype {info.get('dtype')!r} for {name!r}")
            b, e = info["data_offsets"]
            t = torch.empty(info["shape"], dtype=dtype)
            nbytes = t.numel() * t.element_size()
            if e - b != nbytes or base + e > size:
                raise OSError(22, f"{p}: bad offsets for {name!r}")
            if nbytes and f.pread_into(t, base + b) != nbytes:
                raise OSError(5, f"{p}: short read of {name!r}")
            out[name] = t
    return out

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

from . import Store, _norm
from . import datasets as _ds

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
]

METADATA = ".metadata"

StoreLike = Union[None, str, Store]


def _store(store: StoreLike) -> Store:
    if isinstance(store, Store):
        return store
    return Store(store or None, create=True)


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
    named ``root`` or below it that is complete in this store or in a drain destination
    (``dests``, default ``$CKPTFS_DEST``); with ``restore`` its PFS-only files are
    brought back first. When no dataset record names anything under ``root``, the
    newest directory passing the directory rule (by its ``.metadata`` time). None if
    there is none."""
    st = _store(store)
    r = _norm(root)
    ds = _datasets(st, job, dests)
    found = ds.restart_search(r, restore=restore)
    if found["chosen"] is not None:
        return found["chosen"]["name"]
    if any(_under(d["name"], r) for d in ds.list()):
        return None
    return _latest_by_dir(st, r)


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

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self._coordinator = is_coordinator

    def _begin(self) -> None:
        rank, world = _dist_rank_world()
        if self.dataset_world is not None:
            world = self.dataset_world
        elif os.environ.get("LOCAL_WORLD_SIZE", "").isdigit():
            world = int(os.environ["LOCAL_WORLD_SIZE"])
        self._ds = _ds.Datasets(self.store, job=self.job, rank=rank, world=world)
        self._ds_id = self._ds.begin(str(self.path))

    def _complete(self, valid: bool) -> Optional[dict]:
        if self._ds is None or self._ds_id is None:
            return None
        i, self._ds_id = self._ds_id, None
        return self._ds.complete(i, valid)

    def write_data(self, plan: Any, planner: Any) -> Any:
        if self.use_dataset:
            self._begin()
        try:
            with _no_zip_crc32(not self.zip_crc32):
                fut = super().write_data(plan, planner)  # written when it returns (FileSystemWriter)
        except BaseException:
            self._complete(False)
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


class Reader(FileSystemReader):
    """``StorageReader`` for ``dcp.load`` from a node store.

    ``path``: the checkpoint directory. Without it, the newest checkpoint under ``root``
    (default "/") complete on any level (:func:`latest_checkpoint` with ``restore``:
    files only the PFS holds are brought back into the store first, from ``dests``,
    default ``$CKPTFS_DEST``); ``FileNotFoundError`` if there is none. The chosen
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
        if path is None:
            r = _strip_url(root)
            found = latest_checkpoint(r, self.store, job=job, dests=dests, restore=True)
            if found is None:
                raise FileNotFoundError(2, f"no complete checkpoint under {r} in store {self.store.name}")
            self.path = found
        else:
            self.path = _strip_url(path)

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
    st.makedirs(posixpath.dirname(p), exist_ok=True)
    with st.open(p, "wb") as f:
        torch.save(obj, f, **kwargs)


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

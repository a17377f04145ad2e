"""PyTorch on ckptfs: a ``torch.distributed.checkpoint`` storage writer and reader, and
``torch.save``/``torch.load`` helpers.

>>> import torch.distributed.checkpoint as dcp, ckptfs.torch as ct
>>> dcp.save(state, storage_writer=ct.Writer(store="job", path="/run1/step100"))
>>> dcp.load(state, storage_reader=ct.Reader(store="job", root="/run1"))  # latest complete

Each rank writes its shards (``__RANK_N.distcp``) straight into the node store (a memory
copy, no file system); the coordinator writes ``.metadata`` last (as ``.metadata.tmp``,
closed, then renamed), so a checkpoint directory is *complete* when its ``.metadata`` is
present and closed complete, and no file in it is still being written or was left
incomplete by a dead writer (:func:`is_complete`). :func:`latest_checkpoint` finds the
newest complete one under a root; ``Reader(root=...)`` loads it.

Dataset hook: the dataset API (begin/complete/latest restartable, node daemons
protecting it on partners and the PFS) is not in this package yet. Until it is, the two
functions :func:`_dataset_complete` and :func:`_dataset_candidates` below are the whole
contract and are the ones to replace.

GPU tensors: DCP's planner hands CPU tensors to the writer after copying GPU tensors to
host once (``per_thread_copy_ahead``); the writer then copies host memory into the store.
"""

from __future__ import annotations

import io
import os
import posixpath
from contextlib import contextmanager
from typing import Any, Generator, List, Optional, Union

import torch
from torch.distributed.checkpoint.filesystem import FileSystemBase, FileSystemReader, FileSystemWriter

from . import Store, _norm

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


# -- the dataset hook (replace with the dataset API, issue 11) ---------------------------
def _dataset_complete(store: Store, path: str) -> bool:
    """Whether checkpoint directory ``path`` is complete: ``.metadata`` closed complete and
    no file in the directory being written, incomplete (dead writer) or failed."""
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


def _dataset_candidates(store: Store, root: str) -> List[str]:
    """Checkpoint directories under ``root`` (the root itself and its subdirectories)."""
    out = []
    if not store.isdir(root):
        return out
    for dirpath, _dirs, files in store.walk(root):
        if METADATA in files:
            out.append(dirpath)
    return out


# -----------------------------------------------------------------------------------------
def is_complete(path: str, store: StoreLike = None) -> bool:
    """Whether the DCP checkpoint at ``path`` is complete (see the module docs)."""
    return _dataset_complete(_store(store), _norm(path))


def latest_checkpoint(root: str = "/", store: StoreLike = None) -> Optional[str]:
    """The newest complete DCP checkpoint directory under ``root`` (by the time its
    ``.metadata`` was written), or None."""
    st = _store(store)
    best = None
    for p in _dataset_candidates(st, _norm(root)):
        if _dataset_complete(st, p):
            key = (st.stat(posixpath.join(p, METADATA)).mtime_ns, p)
            if best is None or key > best:
                best = key
    return best[1] if best else None


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


class Writer(FileSystemWriter):
    """``StorageWriter`` for ``dcp.save``/``dcp.async_save`` into a node store.

    ``store``: a :class:`ckptfs.Store`, a store name, or None for the settings' default
    store. ``path``: the checkpoint directory in the store (a ``checkpoint_id`` given to
    ``dcp.save`` replaces it). Other keyword arguments go to ``FileSystemWriter``
    (``thread_count``, ``single_file_per_rank``, ...); ``sync_files`` defaults to False:
    data is in the store when written, there is nothing to fsync.
    """

    def __init__(self, store: StoreLike = None, path: Union[str, os.PathLike] = "/", **kwargs: Any) -> None:
        kwargs.setdefault("sync_files", False)
        super().__init__(path="/", **kwargs)
        self.store = _store(store)
        self.fs = _StoreFileSystem(self.store)
        self.path = _strip_url(path)

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        super().reset(_strip_url(checkpoint_id) if checkpoint_id else None)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return _StoreFileSystem.validate_checkpoint_id(checkpoint_id)


class Reader(FileSystemReader):
    """``StorageReader`` for ``dcp.load`` from a node store.

    ``path``: the checkpoint directory. Without it, the newest complete checkpoint under
    ``root`` (default "/") is used (:func:`latest_checkpoint`); ``FileNotFoundError`` if
    there is none. The chosen directory is ``reader.path``.
    """

    def __init__(
        self,
        store: StoreLike = None,
        path: Union[str, os.PathLike, None] = None,
        root: Union[str, os.PathLike] = "/",
        **kwargs: Any,
    ) -> None:
        super().__init__(path="/", **kwargs)
        self.store = _store(store)
        self.fs = _StoreFileSystem(self.store)
        if path is None:
            found = latest_checkpoint(_strip_url(root), self.store)
            if found is None:
                raise FileNotFoundError(2, f"no complete checkpoint under {_strip_url(root)} in store {self.store.name}")
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

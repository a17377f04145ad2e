"""ckptfs for Python: the node-local checkpoint store as Python file objects.

>>> import ckptfs, numpy as np
>>> st = ckptfs.Store("demo", mem_size="64M")
>>> with st.open("/run1/x.bin", "wb") as f:
...     f.write(np.arange(10, dtype=np.float32))      # no copy: buffer protocol
>>> a = np.empty(10, dtype=np.float32)
>>> st.read_into("/run1/x.bin", a)                    # filled in place
40

``Store.open`` returns real :mod:`io` objects (``io.RawIOBase`` for ``buffering=0``,
``io.BufferedReader``/``BufferedWriter``/``BufferedRandom`` otherwise,
``io.TextIOWrapper`` in text mode). Errors are :class:`OSError` subclasses with the
store's errno (``FileNotFoundError``, ``FileExistsError``, ``OSError(ENOSPC)``, ...).
"""

from __future__ import annotations

import errno as _errno
import io
import os
import posixpath
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _native
from ._native import Stat, default_store_name, destroy

__all__ = ["Store", "File", "Stat", "destroy", "default_store_name", "as_buffer"]
__version__ = _native.__version__

_BUFSIZE = 1 << 20


def as_buffer(obj: Any, writable: bool = False) -> Any:
    """The object to hand to the native calls for ``obj``.

    Buffer-protocol objects (bytes, bytearray, memoryview, numpy arrays, mmap) pass
    through unchanged. A torch CPU tensor, which has no buffer protocol of its own, is
    viewed through ``tensor.numpy()`` (shares its memory: no copy); a tensor that needs
    grad is detached first, a non-CPU tensor is refused (copy it to host first).
    """
    t = type(obj)
    if t.__module__.startswith("torch") and hasattr(obj, "numpy"):
        if obj.device.type != "cpu":
            raise ValueError("ckptfs: copy non-CPU tensors to host memory first (tensor.cpu())")
        if not obj.is_contiguous():
            raise BufferError("ckptfs: tensor is not contiguous")
        v = obj.detach().reshape(-1)
        try:
            return v.numpy()
        except TypeError:
            # bfloat16 and other dtypes numpy lacks: view the same bytes as uint8.
            return v.view(__import__("torch").uint8).numpy()
    return obj


class File(io.RawIOBase):
    """An open store file: a real :class:`io.RawIOBase`.

    ``readinto`` and ``write`` take any buffer-protocol object and copy straight between
    it and the store with the GIL released. ``pread_into``/``pwrite`` are positional.
    A writer's ``close`` marks the file complete in the store.
    """

    def __init__(self, native: "_native.File", mode: str, name: str) -> None:
        super().__init__()
        self._f = native
        self.mode = mode
        self.name = name

    # -- io.RawIOBase -----------------------------------------------------------------
    def readable(self) -> bool:
        self._check_closed()
        return self._f.readable()

    def writable(self) -> bool:
        self._check_closed()
        return self._f.writable()

    def seekable(self) -> bool:
        self._check_closed()
        return True

    def readinto(self, b: Any) -> int:  # type: ignore[override]
        self._check_closed()
        if not self._f.readable():
            raise io.UnsupportedOperation("File not open for reading")
        return self._f.readinto(as_buffer(b, True))

    def write(self, b: Any) -> int:  # type: ignore[override]
        self._check_closed()
        if not self._f.writable():
            raise io.UnsupportedOperation("File not open for writing")
        return self._f.write(as_buffer(b))

    def readall(self) -> bytes:
        self._check_closed()
        if not self._f.readable():
            raise io.UnsupportedOperation("File not open for reading")
        pos = self._f.tell()
        n = max(self._f.size() - pos, 0)
        buf = bytearray(n)
        got = self._f.readinto(buf)
        if got < n:
            del buf[got:]
        return bytes(buf)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_closed()
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        self._check_closed()
        return self._f.tell()

    def truncate(self, size: Optional[int] = None) -> int:
        self._check_closed()
        if not self._f.writable():
            raise io.UnsupportedOperation("File not open for writing")
        if size is None:
            size = self._f.tell()
        if size < 0:
            raise OSError(_errno.EINVAL, "negative size")
        return self._f.truncate(size)

    def fileno(self) -> int:
        raise io.UnsupportedOperation("ckptfs files have no OS file descriptor")

    def flush(self) -> None:
        self._check_closed()

    def close(self) -> None:
        if not self.closed:
            try:
                super().close()
            finally:
                self._f.close()

    # -- extras -------------------------------------------------------------------------
    def pread_into(self, b: Any, offset: int) -> int:
        """Read at ``offset`` into ``b`` without moving the position."""
        self._check_closed()
        return self._f.pread_into(as_buffer(b, True), offset)

    def pwrite(self, b: Any, offset: int) -> int:
        """Write all of ``b`` at ``offset`` without moving the position."""
        self._check_closed()
        return self._f.pwrite(as_buffer(b), offset)

    def fsync(self) -> None:
        """Recompute pending checksums (data is in the store as soon as written)."""
        self._check_closed()
        self._f.sync()

    def size(self) -> int:
        """The file's current size."""
        self._check_closed()
        return self._f.size()

    def _check_closed(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def __repr__(self) -> str:
        return f"<ckptfs.File name={self.name!r} mode={self.mode!r}{' closed' if self.closed else ''}>"


def _parse_mode(mode: str) -> Tuple[int, bool, str]:
    """POSIX flags, text?, normalized raw mode, for a Python ``open`` mode string."""
    s = set(mode)
    if len(s) != len(mode) or not s <= set("rwaxbt+") or len(s & set("rwax")) != 1:
        raise ValueError(f"invalid mode: {mode!r}")
    if "b" in s and "t" in s:
        raise ValueError(f"invalid mode: {mode!r}")
    plus = "+" in s
    if "r" in s:
        flags, raw = (os.O_RDWR if plus else os.O_RDONLY), "rb"
    elif "w" in s:
        flags, raw = (os.O_RDWR if plus else os.O_WRONLY) | os.O_CREAT | os.O_TRUNC, "wb"
    elif "a" in s:
        flags, raw = (os.O_RDWR if plus else os.O_WRONLY) | os.O_CREAT | os.O_APPEND, "ab"
    else:
        flags, raw = (os.O_RDWR if plus else os.O_WRONLY) | os.O_CREAT | os.O_EXCL, "xb"
    if plus:
        raw += "+"
    return flags, "b" not in s, raw


def _norm(path: Union[str, os.PathLike]) -> str:
    p = os.fspath(path)
    if not isinstance(p, str):
        p = p.decode()
    p = posixpath.normpath("/" + p.lstrip("/"))
    return "/" if p in ("/", "//") else p


class Store:
    """A node store, opened by name or created (``create=True``).

    Keyword options are the settings table's store options and override the
    ``CKPTFS_*`` variables and the settings file (``config`` or ``$CKPTFS_CONFIG``):
    ``mem_size``, ``chunk_size``, ``max_files``, ``shm_dir``, ``spill_dir``, ``spill_size``,
    ``private``, ``allow_foreign_owner``. Sizes may be ints or strings like ``"256M"``.
    A store outlives the process (``ckptfs.destroy(name)`` removes it).
    """

    def __init__(self, name: Optional[str] = None, create: bool = True, **options: Any) -> None:
        self._s = _native.Store(name, create, **options)

    @property
    def name(self) -> str:
        return self._s.name

    @property
    def chunk_size(self) -> int:
        return self._s.chunk_size

    def open(
        self,
        path: Union[str, os.PathLike],
        mode: str = "r",
        buffering: int = -1,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
        perm: int = 0o644,
    ) -> Union[File, io.BufferedIOBase, io.TextIOWrapper]:
        """Open ``path`` like :func:`open`: ``"rb"``, ``"wb"``, ``"ab"``, ``"xb"``, ``"r+b"``,
        text modes; ``buffering=0`` returns the raw :class:`File`."""
        flags, text, raw_mode = _parse_mode(mode)
        p = _norm(path)
        raw = File(self._s.open(p, flags, perm), raw_mode, p)
        if "a" in raw_mode:
            raw.seek(0, io.SEEK_END)  # like FileIO: append mode starts at the end
        if buffering == 0:
            if text:
                raw.close()
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = _BUFSIZE if buffering in (-1, 1) else buffering
        try:
            if raw.readable() and raw.writable():
                buf: io.BufferedIOBase = io.BufferedRandom(raw, size)
            elif raw.writable():
                buf = io.BufferedWriter(raw, size)
            else:
                buf = io.BufferedReader(raw, size)
        except BaseException:
            raw.close()
            raise
        if text:
            return io.TextIOWrapper(buf, encoding or "utf-8", errors, newline, line_buffering=buffering == 1)
        return buf

    def read_into(self, path: Union[str, os.PathLike], buf: Any, offset: int = 0) -> int:
        """Read ``path`` from ``offset`` straight into ``buf`` (numpy array, bytearray,
        torch CPU tensor, ...); returns the bytes read."""
        return self._s.read_into(_norm(path), as_buffer(buf, True), offset)

    def read_bytes(self, path: Union[str, os.PathLike]) -> bytes:
        """The whole content of ``path``."""
        with self.open(path, "rb", buffering=0) as f:
            return f.readall()

    def write_bytes(self, path: Union[str, os.PathLike], data: Any, makedirs: bool = True) -> int:
        """Create or replace ``path`` with ``data`` (any buffer); the file is complete on return."""
        p = _norm(path)
        if makedirs:
            self.makedirs(posixpath.dirname(p), exist_ok=True)
        with self.open(p, "wb", buffering=0) as f:
            return f.write(data)

    def stat(self, path: Union[str, os.PathLike]) -> Stat:
        """Attributes: ``ino kind mode size chunks mtime_ns uid gid state``."""
        return self._s.stat(_norm(path))

    def exists(self, path: Union[str, os.PathLike]) -> bool:
        try:
            self._s.stat(_norm(path))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isdir(self, path: Union[str, os.PathLike]) -> bool:
        try:
            return self._s.stat(_norm(path)).is_dir()
        except (FileNotFoundError, NotADirectoryError):
            return False

    def listdir(self, path: Union[str, os.PathLike] = "/") -> List[str]:
        """Sorted names in directory ``path``."""
        return self._s.listdir(_norm(path))

    def walk(self, path: Union[str, os.PathLike] = "/"):
        """Like :func:`os.walk` (top-down): (dirpath, dirnames, filenames)."""
        top = _norm(path)
        dirs, files = [], []
        for n in self._s.listdir(top):
            (dirs if self.isdir(posixpath.join(top, n)) else files).append(n)
        yield top, dirs, files
        for d in dirs:
            yield from self.walk(posixpath.join(top, d))

    def mkdir(self, path: Union[str, os.PathLike], mode: int = 0o755) -> None:
        self._s.mkdir(_norm(path), mode)

    def makedirs(self, path: Union[str, os.PathLike], exist_ok: bool = False) -> None:
        """Create ``path`` and missing parents."""
        p = _norm(path)
        if p == "/":
            if not exist_ok:
                raise FileExistsError(_errno.EEXIST, "file exists: /")
            return
        parent = posixpath.dirname(p)
        if not self.exists(parent):
            self.makedirs(parent, exist_ok=True)
        try:
            self._s.mkdir(p, 0o755)
        except FileExistsError:
            if not exist_ok or not self.isdir(p):
                raise

    def rmdir(self, path: Union[str, os.PathLike]) -> None:
        self._s.rmdir(_norm(path))

    def remove(self, path: Union[str, os.PathLike]) -> None:
        """Remove a file (``IsADirectoryError`` for a directory)."""
        self._s.remove(_norm(path))

    unlink = remove

    def rmtree(self, path: Union[str, os.PathLike]) -> None:
        """Remove ``path`` and everything under it."""
        p = _norm(path)
        if not self.isdir(p):
            self._s.remove(p)
            return
        for n in self._s.listdir(p):
            self.rmtree(posixpath.join(p, n))
        if p != "/":
            self._s.rmdir(p)

    def rename(self, src: Union[str, os.PathLike], dst: Union[str, os.PathLike]) -> None:
        """Atomic rename (replaces a file at ``dst``)."""
        self._s.rename(_norm(src), _norm(dst))

    def truncate(self, path: Union[str, os.PathLike], size: int) -> None:
        self._s.truncate(_norm(path), size)

    def chunk_list(self, path: Union[str, os.PathLike]) -> List[Dict[str, Any]]:
        """The file's chunks in logical order (see :meth:`data_region`)."""
        return self._s.chunk_list(_norm(path))

    def data_region(self) -> Tuple[int, int, int]:
        """(address, length, chunk size) of the memory data region in this process."""
        return self._s.data_region()

    def info(self) -> Dict[str, Any]:
        return self._s.info()

    def destroy(self) -> None:
        """Remove this store's segment (this object stays usable until dropped)."""
        destroy(self.name)

    def __repr__(self) -> str:
        return f"ckptfs.Store({self.name!r})"


from . import datasets  # noqa: E402  (ckptfs.datasets; imports Store from here)

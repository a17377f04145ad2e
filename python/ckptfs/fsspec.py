"""The ``ckptfs://`` fsspec file system (registered through the ``fsspec.specs`` entry
point, so ``fsspec.open("ckptfs:///run1/x.bin", "wb")`` works once ckptfs is installed).

URLs: ``ckptfs:///PATH`` is PATH in the default store (the settings': ``$CKPTFS_STORE``,
the settings file, or ``u<UID>``); ``ckptfs://NAME/PATH`` is PATH in store NAME. Storage
options: ``store`` (a name or a :class:`ckptfs.Store`), ``create`` (default True) and the
store settings (``mem_size``, ...), as for :class:`ckptfs.Store`.
"""

from __future__ import annotations

import posixpath
from typing import Any, Dict, List, Optional, Union

from fsspec.spec import AbstractFileSystem

from . import Store, _norm


class CkptFileSystem(AbstractFileSystem):
    """fsspec file system over one ckptfs node store."""

    protocol = ("ckptfs",)
    root_marker = "/"
    # Not cached: ckptfs:/// means the default store of the settings at call time
    # ($CKPTFS_STORE may change), and attaching a store is cheap.
    cachable = False

    def __init__(self, store: Union[None, str, Store] = None, create: bool = True, **options: Any) -> None:
        fs_keys = ("skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths")
        fs_opts = {k: options.pop(k) for k in list(options) if k in fs_keys}
        super().__init__(**fs_opts)
        if isinstance(store, Store):
            self.store = store
        else:
            self.store = Store(store or None, create=create, **options)

    # -- paths ------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("ckptfs://"):
            rest = path[len("ckptfs://"):]
            # ckptfs://NAME/PATH: drop the store name (it went to storage options).
            if not rest.startswith("/"):
                rest = "/" + rest.partition("/")[2]
            path = rest
        elif path.startswith("ckptfs:"):
            path = path[len("ckptfs:"):]
        return _norm(path) if path else "/"

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> Dict[str, Any]:
        if path.startswith("ckptfs://"):
            host = path[len("ckptfs://"):].partition("/")[0]
            if host:
                return {"store": host}
        return {}

    def unstrip_protocol(self, name: str) -> str:
        return f"ckptfs://{self.store.name}{_norm(name)}"

    # -- metadata ---------------------------------------------------------------------
    def _entry(self, path: str) -> Dict[str, Any]:
        st = self.store.stat(path)
        return {
            "name": path,
            "size": st.size,
            "type": "directory" if st.is_dir() else "file",
            "mode": st.mode,
            "mtime": st.mtime_ns / 1e9,
            "state": st.state,
            "ino": st.ino,
        }

    def info(self, path, **kwargs):
        return self._entry(self._strip_protocol(path))

    def ls(self, path, detail=True, **kwargs):
        p = self._strip_protocol(path)
        st = self.store.stat(p)
        if not st.is_dir():
            entries = [self._entry(p)]
        else:
            entries = [self._entry(posixpath.join(p, n)) for n in self.store.listdir(p)]
        return entries if detail else [e["name"] for e in entries]

    def modified(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    created = modified

    # -- namespace --------------------------------------------------------------------
    def mkdir(self, path, create_parents=True, **kwargs):
        p = self._strip_protocol(path)
        if create_parents:
            self.store.makedirs(p, exist_ok=True)
        else:
            self.store.mkdir(p)

    def makedirs(self, path, exist_ok=False):
        self.store.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.store.rmdir(self._strip_protocol(path))

    def rm_file(self, path):
        # fsspec's recursive rm calls this for directories too (deepest first).
        self._rm(path)

    def _rm(self, path):
        p = self._strip_protocol(path)
        if self.store.isdir(p):
            self.store.rmdir(p)
        else:
            self.store.remove(p)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        """Atomic rename inside the store."""
        self.store.rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def cp_file(self, path1, path2, **kwargs):
        src, dst = self._strip_protocol(path1), self._strip_protocol(path2)
        if self.store.isdir(src):
            self.store.makedirs(dst, exist_ok=True)
            return
        with self.store.open(src, "rb") as fi, self.store.open(dst, "wb") as fo:
            while True:
                b = fi.read(1 << 22)
                if not b:
                    break
                fo.write(b)

    # -- data -------------------------------------------------------------------------
    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        p = self._strip_protocol(path)
        if "r" not in mode:
            parent = posixpath.dirname(p)
            if parent != "/" and not self.store.exists(parent):
                self.store.makedirs(parent, exist_ok=True)
        if "b" not in mode:
            mode += "b"
        buffering = block_size if block_size and block_size > 0 else -1
        return self.store.open(p, mode, buffering=buffering)

    def cat_file(self, path, start=None, end=None, **kwargs):
        p = self._strip_protocol(path)
        size = self.store.stat(p).size
        start = 0 if start is None else (size + start if start < 0 else start)
        end = size if end is None else (size + end if end < 0 else min(end, size))
        if end <= start:
            return b""
        buf = bytearray(end - start)
        n = self.store.read_into(p, buf, start)
        return bytes(buf[:n])

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        p = self._strip_protocol(path)
        if mode == "create" and self.store.exists(p):
            raise FileExistsError(p)
        self.store.write_bytes(p, value)

    def sign(self, path, expiration=100, **kwargs):
        raise NotImplementedError("ckptfs paths cannot be signed")

"""dlopen libckptfs.so from Python (ctypes) and round-trip a file: the shared library
loads on its own and the 0 / -errno convention maps to OSError. Usage: capi_smoke.py LIB"""
import ctypes
import errno
import os
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.ckptfs_version.restype = ctypes.c_char_p
lib.ckptfs_last_error.restype = ctypes.c_char_p
lib.ckptfs_read.restype = lib.ckptfs_write.restype = ctypes.c_ssize_t
lib.ckptfs_read.argtypes = lib.ckptfs_write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]


def check(rc):
    if rc < 0:
        raise OSError(-rc, lib.ckptfs_last_error().decode())
    return rc


store = f"capi-py-{os.getpid()}"
os.environ.update(CKPTFS_STORE=store, CKPTFS_MEM_SIZE="1M", CKPTFS_CHUNK_SIZE="64K")
check(lib.ckptfs_mount(b"/py", None))
try:
    fd = check(lib.ckptfs_open(b"/py/x", os.O_CREAT | os.O_WRONLY, 0o644))
    assert check(lib.ckptfs_write(fd, b"from python", 11)) == 11
    check(lib.ckptfs_close(fd))
    fd = check(lib.ckptfs_open(b"/py/x", os.O_RDONLY, 0))
    buf = ctypes.create_string_buffer(64)
    assert check(lib.ckptfs_read(fd, buf, 64)) == 11 and buf.value == b"from python"
    check(lib.ckptfs_close(fd))
    try:
        check(lib.ckptfs_open(b"/py/missing", os.O_RDONLY, 0))
        raise AssertionError("opened a missing file")
    except OSError as e:
        assert e.errno == errno.ENOENT and "/py/missing" in e.strerror, e
finally:
    lib.ckptfs_unmount(b"/py")
    lib.ckptfs_destroy_store(store.encode())
print(f"capi_smoke.py: ok (libckptfs {lib.ckptfs_version().decode()})")

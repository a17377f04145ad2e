"""ckptfs.Store and ckptfs.File: buffer-protocol I/O without copies, io classes, listing,
stat, remove, rename, chunk list, settings resolution and errno mapping."""

import errno
import io
import os

import numpy as np
import pytest

import ckptfs


def test_open_returns_real_io_objects(store):
    store.makedirs("/run1")
    raw = store.open("/run1/a", "wb", buffering=0)
    assert isinstance(raw, io.RawIOBase) and isinstance(raw, ckptfs.File)
    raw.close()
    w = store.open("/run1/a", "wb")
    assert isinstance(w, io.BufferedWriter)
    w.write(b"hello")
    w.close()
    r = store.open("/run1/a", "rb")
    assert isinstance(r, io.BufferedReader)
    assert r.read() == b"hello"
    r.close()
    with store.open("/run1/a", "r+b") as rw:
        assert isinstance(rw, io.BufferedRandom)
    with store.open("/run1/t.txt", "w") as t:
        assert isinstance(t, io.TextIOWrapper)
        t.write("línea\n")
    with store.open("/run1/t.txt") as t:
        assert t.read() == "línea\n"


def test_numpy_array_round_trip_through_readinto_and_read_into(store):
    a = np.arange(100_000, dtype=np.float64)  # spans several 64 KiB chunks
    with store.open("/a.bin", "wb", buffering=0) as f:
        assert f.write(a) == a.nbytes
    b = np.zeros_like(a)
    with store.open("/a.bin", "rb", buffering=0) as f:
        assert f.readinto(b) == a.nbytes
    assert np.array_equal(a, b)
    c = np.zeros_like(a)
    assert store.read_into("/a.bin", c) == a.nbytes
    assert np.array_equal(a, c)
    # offset read into a memoryview slice of a bytearray: filled in place
    ba = bytearray(16)
    assert store.read_into("/a.bin", memoryview(ba)[8:], offset=8) == 8
    assert bytes(ba[8:]) == a.tobytes()[8:16]


def test_write_accepts_bytes_memoryview_and_2d_arrays(store):
    m = np.arange(12, dtype=np.int32).reshape(3, 4)
    with store.open("/m", "wb", buffering=0) as f:
        f.write(b"ab")
        f.write(memoryview(b"cd"))
        f.write(m)
    assert store.read_bytes("/m") == b"abcd" + m.tobytes()


def test_non_contiguous_and_readonly_buffers_are_refused(store):
    a = np.arange(20, dtype=np.int64)[::2]
    with store.open("/x", "wb", buffering=0) as f:
        with pytest.raises((BufferError, ValueError)):  # numpy says ValueError
            f.write(a)
    with store.open("/x", "rb", buffering=0) as f:
        with pytest.raises((BufferError, TypeError)):
            f.readinto(b"immutable")


def test_positional_io_does_not_move_the_position(store):
    with store.open("/p", "w+b", buffering=0) as f:
        f.write(b"0123456789")
        f.pwrite(b"AB", 2)
        assert f.tell() == 10
        buf = bytearray(4)
        assert f.pread_into(buf, 1) == 4
        assert bytes(buf) == b"1AB4"
        assert f.tell() == 10


def test_listdir_stat_remove_rename_mkdir(store):
    store.makedirs("/r/s")
    store.write_bytes("/r/s/f1", b"x" * 10)
    store.write_bytes("/r/f2", b"")
    assert store.listdir("/r") == ["f2", "s"]
    st = store.stat("/r/s/f1")
    assert st.size == 10 and st.kind == "file" and st.state == "complete" and not st.is_dir()
    assert store.stat("/r/s").is_dir()
    store.rename("/r/s/f1", "/r/g")
    assert store.listdir("/r") == ["f2", "g", "s"]
    store.remove("/r/f2")
    assert not store.exists("/r/f2")
    store.rmtree("/r")
    assert store.listdir("/") == []


def test_chunk_list_and_data_region_give_the_bytes(store):
    data = os.urandom(200_000)
    store.write_bytes("/c", data)
    chunks = store.chunk_list("/c")
    assert [c["logical"] for c in chunks] == [0, 1, 2, 3]
    assert sum(c["len"] for c in chunks) == len(data)
    addr, length, cs = store.data_region()
    assert cs == store.chunk_size == 64 * 1024 and length >= 16 * 1024 * 1024 - cs
    import ctypes

    got = b"".join(ctypes.string_at(addr + c["offset"], c["len"]) for c in chunks if c["location"] == "memory")
    assert got == data


def test_errors_map_to_oserror_subclasses_with_the_store_errno(store):
    with pytest.raises(FileNotFoundError) as e:
        store.open("/missing", "rb")
    assert e.value.errno == errno.ENOENT
    store.mkdir("/d")
    with pytest.raises(FileExistsError):
        store.mkdir("/d")
    with pytest.raises(IsADirectoryError):
        store.open("/d", "wb")
    store.write_bytes("/d/f", b"1")
    with pytest.raises(OSError) as e:
        store.rmdir("/d")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(NotADirectoryError):
        store.open("/d/f/x", "wb")
    with pytest.raises(FileExistsError):
        store.open("/d/f", "xb")
    with pytest.raises(OSError) as e:
        store.open("/" + "n" * 300, "wb")
    assert e.value.errno == errno.ENAMETOOLONG


def test_full_store_raises_enospc(store):
    big = np.zeros(1 << 20, dtype=np.uint8)
    with pytest.raises(OSError) as e:
        with store.open("/fill", "wb", buffering=0) as f:
            for _ in range(64):  # 64 MiB into a 16 MiB store
                f.write(big)
    assert e.value.errno == errno.ENOSPC
    assert store.stat("/fill").state == "failed"


def test_closed_file_raises_valueerror_and_close_twice_is_fine(store):
    f = store.open("/c", "wb", buffering=0)
    f.close()
    f.close()
    with pytest.raises(ValueError):
        f.write(b"x")


def test_wrong_direction_raises_unsupported_operation(store):
    store.write_bytes("/r", b"abc")
    with store.open("/r", "rb", buffering=0) as f:
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"x")
    with store.open("/w", "wb", buffering=0) as f:
        with pytest.raises(io.UnsupportedOperation):
            f.read()


def test_attach_without_create_is_file_not_found(store_name):
    with pytest.raises(FileNotFoundError):
        ckptfs.Store(store_name, create=False)


def test_bad_setting_is_einval_naming_the_setting(store_name):
    with pytest.raises(OSError) as e:
        ckptfs.Store(store_name, chunk_size="3K")
    assert e.value.errno == errno.EINVAL and "chunk_size" in str(e.value)


def test_settings_resolve_kwargs_over_env_over_file(store_name, tmp_path, monkeypatch):
    cfg = tmp_path / "ckptfs.toml"
    cfg.write_text(f'store = "{store_name}"\nmem_size = "8M"\nchunk_size = "128K"\n')
    monkeypatch.setenv("CKPTFS_CONFIG", str(cfg))
    monkeypatch.setenv("CKPTFS_CHUNK_SIZE", "256K")
    s = ckptfs.Store(max_files=64)  # name and mem_size from the file, chunk size from env
    assert s.name == store_name
    assert s.chunk_size == 256 * 1024
    assert s.info()["mem_size"] <= 8 * 1024 * 1024 and s.info()["max_files"] == 64


def test_store_is_shared_between_two_handles(store, store_name):
    other = ckptfs.Store(store_name, create=False)
    store.write_bytes("/shared", b"seen")
    assert other.read_bytes("/shared") == b"seen"


def test_threads_write_and_read_their_own_files_concurrently(store):
    # The GIL is released around copies: threads run their copies side by side and
    # every file must come back intact.
    import threading

    def work(i, errors):
        try:
            a = np.full(50_000, i, dtype=np.int64)
            with store.open(f"/thr{i}", "wb", buffering=0) as f:
                f.write(a)
            b = np.empty_like(a)
            store.read_into(f"/thr{i}", b)
            assert np.array_equal(a, b)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    errors = []
    ts = [threading.Thread(target=work, args=(i, errors)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert store.listdir("/") == [f"thr{i}" for i in range(4)]


def test_one_file_object_shared_by_threads_serialises_writes(store):
    import threading

    f = store.open("/shared.bin", "ab", buffering=0)
    blocks = [bytes([i]) * 10_000 for i in range(8)]
    ts = [threading.Thread(target=f.write, args=(b,)) for b in blocks]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    f.close()
    data = store.read_bytes("/shared.bin")
    assert len(data) == 80_000
    # each append landed whole (no interleaving inside a write)
    got = sorted(data[i : i + 10_000] for i in range(0, 80_000, 10_000))
    assert got == sorted(blocks)

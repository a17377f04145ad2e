"""Property test: a store file object behaves like Python's own file object (on a real
file in a temporary directory) under random seek/tell/read/readinto/write/truncate
sequences, raw and buffered."""

import io
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptfs

from conftest import unique_name

_ops = st.one_of(
    st.tuples(st.just("write"), st.binary(max_size=300)),
    st.tuples(st.just("read"), st.integers(-1, 400)),
    st.tuples(st.just("readinto"), st.integers(0, 400)),
    st.tuples(st.just("seek"), st.integers(0, 2), st.integers(-200, 200_000)),
    st.tuples(st.just("tell")),
    st.tuples(st.just("truncate"), st.one_of(st.none(), st.integers(0, 200_000))),
    st.tuples(st.just("flush")),
)


def _apply(f, op):
    """Run one operation; the result or the exception type."""
    try:
        kind = op[0]
        if kind == "write":
            return f.write(op[1])
        if kind == "read":
            return f.read(op[1])
        if kind == "readinto":
            b = bytearray(op[1])
            n = f.readinto(b)
            return (n, bytes(b[:n]))
        if kind == "seek":
            whence, off = op[1], op[2]
            if whence == 0:
                off = abs(off)
            return f.seek(off, whence)
        if kind == "tell":
            return f.tell()
        if kind == "truncate":
            return f.truncate(op[1])
        if kind == "flush":
            return f.flush()
    except (OSError, ValueError) as e:
        return type(e).__name__ if not isinstance(e, OSError) else ("OSError", e.errno)


_STORE = {}


def _store():
    if "s" not in _STORE:
        name = unique_name("prop")
        _STORE["s"] = ckptfs.Store(name, mem_size="16M", chunk_size="64K")
    return _STORE["s"]


def teardown_module():
    if "s" in _STORE:
        ckptfs.destroy(_STORE.pop("s").name)


# derandomize: CI runs the same 150 sequences every time (a failure is reproducible and
# never a one-off); HYPOTHESIS_SEED / a local run with derandomize off explores further.
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    initial=st.binary(max_size=2000),
    mode=st.sampled_from(["r+b", "w+b", "a+b"]),
    buffering=st.sampled_from([0, -1, 64]),
    ops=st.lists(_ops, max_size=30),
)
def test_store_file_matches_python_file(tmp_path_factory, initial, mode, buffering, ops):
    d = tmp_path_factory.mktemp("prop")
    real = os.path.join(d, "f")
    with open(real, "wb") as f:
        f.write(initial)
    s = _store()
    s.write_bytes("/f", initial)
    # The reference is Python's own io.BufferedRandom over a real file, with the buffer
    # size ckptfs uses. (`open()` sizes its buffer from st_blksize, and in append mode the
    # buffered position after a write depends on the buffer size: CPython does not know
    # that the raw write went to the end, so `seek(n, 1)` gives one answer when the target
    # is inside its read buffer and another when it is not. Hypothesis found that.)
    if buffering == 0:
        a = open(real, mode, buffering=0)
    else:
        size = ckptfs._BUFSIZE if buffering == -1 else buffering
        a = io.BufferedRandom(io.FileIO(real, mode), size)
    b = s.open("/f", mode, buffering=buffering)
    try:
        for i, op in enumerate(ops):
            ra, rb = _apply(a, op), _apply(b, op)
            assert ra == rb, (i, op, ra, rb)
    finally:
        a.close()
        b.close()
    with open(real, "rb") as f:
        want = f.read()
    assert s.read_bytes("/f") == want

"""DCP checkpoints written through ckptfs.torch.Writer leave the node through the drain
agent and come back: the drained directory is a plain DCP checkpoint torch's own
FileSystemReader loads, and after the node store is lost, `ckptfs restore` brings the
checkpoints back and ckptfs.torch.Reader resumes from the latest complete one."""

import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _ckptfs_bin():
    d = os.environ.get("CKPTFS_BIN_DIR") or str(ROOT / "target" / "release")
    p = Path(d) / "ckptfs"
    if not p.is_file():
        pytest.skip(f"{p} not built (cargo build --release -p ckptfs-cli)")
    return str(p)


def _state(step):
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(256, 64, generator=g), "step": torch.tensor(step)}


def _run(*args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def test_drained_checkpoint_loads_with_torch_and_restores_after_store_loss(store_name, tmp_path):
    exe = _ckptfs_bin()
    store = ckptfs.Store(store_name, mem_size="16M", chunk_size="64K")
    for step in (1, 2):
        dcp.save(_state(step), storage_writer=ct.Writer(store=store, path=f"/job/step{step}"))
    pfs = tmp_path / "pfs"
    pfs.mkdir()
    _run(exe, "--store", store_name, "agent", "--dest", str(pfs), "--once")
    # The PFS copy is a plain DCP checkpoint.
    dst = {k: torch.zeros_like(v) for k, v in _state(0).items()}
    dcp.load(dst, storage_reader=dcp.FileSystemReader(str(pfs / "job" / "step2")))
    assert torch.equal(dst["w"], _state(2)["w"]) and int(dst["step"]) == 2
    # The node's store is lost; restore brings the checkpoints back into a new one.
    del store
    ckptfs.destroy(store_name)
    _run(exe, "--store", store_name, "--mem-size", "16M", "--chunk-size", "64K", "restore", "--dest", str(pfs))
    store = ckptfs.Store(store_name, create=False)
    reader = ct.Reader(store=store, root="/job")
    assert reader.path == "/job/step2"
    dst = {k: torch.zeros_like(v) for k, v in _state(0).items()}
    dcp.load(dst, storage_reader=reader)
    assert torch.equal(dst["w"], _state(2)["w"]) and int(dst["step"]) == 2

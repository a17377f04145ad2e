"""ckptfs.torch.Reader finds and loads a checkpoint that exists only in object storage:
the DCP checkpoints written through ckptfs.torch.Writer are drained to a real S3 server
(versitygw, scripts/s3-local.sh, on a private port with generated keys), the node's
memory copies are lost, no PFS destination is given, and the settings' `[levels]` read
order (CKPTFS_LEVELS) names the bucket: the Reader brings the newest checkpoint back from
S3, every chunk checked, and resumes from it; with one of its objects damaged in the
server's data directory it is refused and the older checkpoint is loaded instead.

The server's binary: $VERSITYGW, else .tools/s3/bin/versitygw (scripts/setup-s3.sh);
without it the test is skipped, unless CKPTFS_REQUIRE_SERVICES is set (CI), where it
fails. Ports: $S3_LOCAL_PORTS (default 30900-30999, conftest.py); bucket: $S3_LOCAL_BUCKET (ckptfs)."""

import os
import subprocess
import warnings
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
    return {"w": torch.randn(512, 256, generator=g), "step": torch.tensor(step)}


@pytest.fixture
def s3(tmp_path):
    """A versitygw server of its own: (its export variables, its directory, the bucket)."""
    binary = Path(os.environ.get("VERSITYGW") or ROOT / ".tools" / "s3" / "bin" / "versitygw")
    if not binary.is_file():
        if os.environ.get("CKPTFS_REQUIRE_SERVICES"):
            pytest.fail(f"no S3 server ({binary}): scripts/setup-s3.sh did not build it")
        pytest.skip(f"no S3 server ({binary}): run scripts/setup-s3.sh")
    d = tmp_path / "s3"
    bucket = os.environ.get("S3_LOCAL_BUCKET", "ckptfs")
    env = dict(os.environ, VERSITYGW=str(binary), S3_LOCAL_BUCKET=bucket)
    env.setdefault("S3_LOCAL_PORTS", "30900-30999")
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "s3-local.sh"), "start", str(d)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    exports = {}
    for line in r.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export ") :].split("=", 1)
            exports[k] = v
    yield exports, d, bucket
    subprocess.run(["bash", str(ROOT / "scripts" / "s3-local.sh"), "stop", str(d)], capture_output=True, env=env)


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def test_reader_loads_a_checkpoint_only_in_s3_and_refuses_a_damaged_object(store_name, tmp_path, s3, monkeypatch):
    exports, sdir, bucket = s3
    exe = _ckptfs_bin()
    for k, v in exports.items():
        monkeypatch.setenv(k, v)
    for k in ("CKPTFS_DEST", "CKPTFS_CLUSTER", "CKPTFS_S3_COMPRESS", "AWS_PROFILE", "CKPTFS_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CKPTFS_NODE_ID", "pynode")
    store = ckptfs.Store(store_name, mem_size="32M", chunk_size="64K")
    for step in (1, 2):
        dcp.save(_state(step), storage_writer=ct.Writer(store=store, path=f"/job/step{step}"))
    r = subprocess.run(
        [exe, "--store", store_name, "agent", "--dest", f"s3://{bucket}/run1", "--once"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    # The node's memory copies are lost (the dataset records stay); no PFS is given.
    store.rmtree("/job")
    level = f"s3:{bucket}/run1"
    monkeypatch.setenv("CKPTFS_LEVELS", f"local,partner,{level}")
    listed = {d["name"]: d for d in ckptfs.datasets.Datasets(store).list()}
    files = listed["/job/step2"]["files"]
    assert files and all(f["levels"] == [level] for f in files.values()), files
    reader = ct.Reader(store=store, root="/job")
    assert reader.path == "/job/step2"
    dst = {k: torch.zeros_like(v) for k, v in _state(0).items()}
    dcp.load(dst, storage_reader=reader)
    assert torch.equal(dst["w"], _state(2)["w"]) and int(dst["step"]) == 2
    # Without the level in the read order the checkpoint is on no level.
    store.rmtree("/job")
    monkeypatch.setenv("CKPTFS_LEVELS", "local,partner,pfs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the two datasets, skipped
        with pytest.raises(FileNotFoundError):
            ct.Reader(store=store, root="/job")
    # A damaged object of step2 is refused (never served): the Reader takes step1.
    monkeypatch.setenv("CKPTFS_LEVELS", f"local,{level}")
    shards = sorted((sdir / "data" / bucket / "run1" / "data" / "job" / "step2").glob("*.distcp"))
    assert shards, list((sdir / "data" / bucket).rglob("*"))
    _flip(shards[0], shards[0].stat().st_size // 2)
    with pytest.warns(RuntimeWarning, match="step2"):
        reader = ct.Reader(store=store, root="/job")
    assert reader.path == "/job/step1"
    dst = {k: torch.zeros_like(v) for k, v in _state(0).items()}
    dcp.load(dst, storage_reader=reader)
    assert torch.equal(dst["w"], _state(1)["w"]) and int(dst["step"]) == 1
    assert not store.exists(f"/job/step2/{shards[0].name}"), "nothing of the damaged copy is published"


def test_list_checkpoints_reports_an_s3_held_checkpoint_by_level_id(store_name, tmp_path, s3, monkeypatch):
    """ckptfs.torch.list_checkpoints reports the levels the native side reports, by id:
    a checkpoint drained to S3 lists ``s3:BUCKET/PREFIX`` next to ``local``, and once the
    memory copy is gone only the object level, still loadable; no level kind is spelled
    out in Python, so a level added later shows up the same way."""
    exports, _sdir, bucket = s3
    exe = _ckptfs_bin()
    for k, v in exports.items():
        monkeypatch.setenv(k, v)
    for k in ("CKPTFS_DEST", "CKPTFS_CLUSTER", "CKPTFS_S3_COMPRESS", "AWS_PROFILE", "CKPTFS_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CKPTFS_NODE_ID", "pynode")
    store = ckptfs.Store(store_name, mem_size="32M", chunk_size="64K")
    dcp.save(_state(1), storage_writer=ct.Writer(store=store, path="/lv/step1"))
    level = f"s3:{bucket}/run7"
    # The drain's target from the [levels] section (no --dest).
    monkeypatch.setenv("CKPTFS_LEVELS", f"local,partner,{level}")
    r = subprocess.run(
        [exe, "--store", store_name, "agent", "--once"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    rows = {x["name"]: x for x in ct.list_checkpoints("/lv", store)}
    assert rows["/lv/step1"]["levels"] == ["local", level], rows
    store.rmtree("/lv")
    rows = {x["name"]: x for x in ct.list_checkpoints("/lv", store)}
    assert rows["/lv/step1"]["levels"] == [level], rows
    assert rows["/lv/step1"]["loadable"], rows
    # The record's files say the same, file by file.
    listed = {d["name"]: d for d in ckptfs.datasets.Datasets(store).list()}
    assert all(f["levels"] == [level] for f in listed["/lv/step1"]["files"].values()), listed

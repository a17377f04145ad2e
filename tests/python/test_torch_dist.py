"""A 2-process gloo job (torch.multiprocessing.spawn) saves a model and its optimizer
state through ckptfs.torch.Writer with dcp.save and dcp.async_save; in a later save rank
1 is SIGKILLed half-way through writing its shard; a new job resumes from the latest
complete checkpoint and gets identical tensors."""

import os
import signal

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402

import ckptfs  # noqa: E402
import ckptfs.datasets  # noqa: E402,F401
import ckptfs.torch as ct  # noqa: E402

WORLD = 2


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train_step(model, opt, step, rank):
    # The same batch on every rank (as after DDP's gradient all-reduce): the model and
    # optimizer are replicated, and DCP saves one copy of replicated tensors.
    g = torch.Generator().manual_seed(1000 * step)
    x = torch.randn(8, 16, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def _state(model, opt, rank, step):
    msd, osd = get_state_dict(model, opt)
    # A tensor only this rank has, so both ranks write a shard of their own.
    return {"model": msd, "optim": osd, f"rank{rank}": {"data": torch.full((4096,), float(step * 10 + rank))}}


class _DieMidShard(ct.Writer):
    """Rank 1 begins its part of the dataset, starts its shard, writes part of it, then
    is SIGKILLed."""

    def write_data(self, plan, planner):
        if dist.get_rank() == 1:
            self._begin()
            with self.store.open(f"{self.path}/__1_0.distcp", "wb", buffering=0) as f:
                f.write(b"\0" * 10000)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().write_data(plan, planner)


def _init(rank, pg_file):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=rank, world_size=WORLD)


def _save_job(rank, store_name, pg_file, ref_dir):
    _init(rank, pg_file)
    store = ckptfs.Store(store_name, create=False)
    model = _model(0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in (1, 2):
        _train_step(model, opt, step, rank)
        sd = _state(model, opt, rank, step)
        w = ct.Writer(store=store, path=f"/job/step{step}")
        if step == 1:
            dcp.save(sd, storage_writer=w)
        else:
            dcp.async_save(sd, storage_writer=w).result()
        dist.barrier()
    # The reference: what step 2 saved.
    torch.save(_state(model, opt, rank, 2), os.path.join(ref_dir, f"ref{rank}.pt"))
    dist.barrier()
    _train_step(model, opt, 3, rank)
    dcp.save(_state(model, opt, rank, 3), storage_writer=_DieMidShard(store=store, path="/job/step3"))
    raise AssertionError("unreachable: rank 1 dies during the step 3 save")


def _resume_job(rank, store_name, pg_file, ref_dir):
    _init(rank, pg_file)
    store = ckptfs.Store(store_name, create=False)
    model = _model(123)  # different weights: all must come from the checkpoint
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _train_step(model, opt, 99, rank)  # optimizer state exists, different values
    reader = ct.Reader(store=store, root="/job")
    assert reader.path == "/job/step2", reader.path
    sd = _state(model, opt, rank, 0)
    dcp.load(sd, storage_reader=reader)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    ref = torch.load(os.path.join(ref_dir, f"ref{rank}.pt"), weights_only=False)
    got = _state(model, opt, rank, 0)
    got[f"rank{rank}"] = sd[f"rank{rank}"]
    _assert_same(ref, got, "")
    dist.barrier()
    dist.destroy_process_group()


def _assert_same(a, b, where):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), (where, set(a), set(b))
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def test_rank_killed_mid_save_job_resumes_from_latest_complete(store_name, tmp_path):
    store = ckptfs.Store(store_name, mem_size="64M", chunk_size="64K")
    ctx = mp.spawn(_save_job, args=(store_name, str(tmp_path / "pg1"), str(tmp_path)), nprocs=WORLD, join=False)
    # Rank 1 dies by SIGKILL; rank 0 then either fails on the broken gloo connection or is
    # terminated by spawn, whichever comes first: only rank 1's end is asserted.
    with pytest.raises((mp.ProcessExitedException, mp.ProcessRaisedException)):
        while not ctx.join():
            pass
    assert ctx.processes[1].exitcode == -signal.SIGKILL
    assert ct.is_complete("/job/step1", store) and ct.is_complete("/job/step2", store)
    assert not ct.is_complete("/job/step3", store)
    assert store.stat("/job/step3/__1_0.distcp").state == "incomplete"
    assert ct.latest_checkpoint("/job", store) == "/job/step2"
    # One dataset per save: step 1 and 2 complete with both ranks' parts, step 3
    # incomplete because a rank died before completing its part.
    recs = {d["name"]: d for d in ckptfs.datasets.Datasets(store).list()}
    assert recs["/job/step1"]["state"] == "complete" and recs["/job/step2"]["state"] == "complete"
    assert set(recs["/job/step2"]["parts"]) == {"0", "1"} and recs["/job/step2"]["parts_expected"] == 2
    assert "/job/step2/.metadata" in recs["/job/step2"]["files"]
    assert recs["/job/step3"]["state"] == "incomplete" and "died" in recs["/job/step3"]["reason"], recs["/job/step3"]
    mp.spawn(_resume_job, args=(store_name, str(tmp_path / "pg2"), str(tmp_path)), nprocs=WORLD, join=True)

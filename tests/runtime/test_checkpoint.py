"""CheckpointManager: atomic saves under SIGKILL, verification, rotation, async save, RNG state,
and the collective protocol on 4 gloo ranks."""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from preflight.runtime import checkpoint as ck
from preflight.runtime.checkpoint import (
    CheckpointError,
    CheckpointManager,
    capture_rng_state,
    restore_rng_state,
    snapshot_to_cpu,
    validate,
)
from preflight.runtime.events import EventWriter, read_events
from tests.runtime._checkpoint_ranks import run_ranks


def make_state(step: int, n: int = 1 << 16) -> dict[str, Any]:
    """A state whose content is a function of the step, so a loaded one can be checked."""
    return {"w": torch.full((n,), float(step)), "b": torch.arange(step % 97 + 1, dtype=torch.int64),
            "nested": {"m": [torch.ones(3, 3) * step, step]}, "step": step}


def assert_state(state: dict[str, Any], step: int, n: int = 1 << 16) -> None:
    want = make_state(step, n)
    assert state["step"] == step
    assert torch.equal(state["w"], want["w"])
    assert torch.equal(state["b"], want["b"])
    assert torch.equal(state["nested"]["m"][0], want["nested"]["m"][0])


def events_of(run: Path, check: str = "runtime.checkpoint") -> list[dict[str, Any]]:
    return [e for e in read_events(run) if e["check"] == check]


# ------------------------------------------------------------------ layout, verification


def test_save_layout_manifest_and_load(tmp_path: Path) -> None:
    ev = EventWriter(tmp_path / "run", rank=0)
    with CheckpointManager(tmp_path / "ck", events=ev) as mgr:
        mgr.save(7, make_state(7))
        folder = tmp_path / "ck" / "step-00000007"
        assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "rank0.pt"]
        man = json.loads((folder / "manifest.json").read_text())
        assert man["step"] == 7 and man["world_size"] == 1 and man["version"] == ck.FORMAT_VERSION
        size = (folder / "rank0.pt").stat().st_size
        assert man["files"]["rank0.pt"]["size"] == size
        assert man["files"]["rank0.pt"]["sha256"] == ck._sha256_file(folder / "rank0.pt")[0]
        assert not [p for p in (tmp_path / "ck").iterdir() if p.name.startswith(".staging")]
        info = mgr.latest()
        assert info is not None and info.step == 7
        loaded = mgr.load_latest()
        assert loaded is not None and loaded[0] == 7
        assert_state(loaded[1], 7)
    saved = [e for e in events_of(tmp_path / "run") if "saved" in e["summary"]]
    assert saved and saved[0]["facts"]["step"] == 7 and saved[0]["status"] == "pass"


def test_empty_directory_gives_none(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "none")
    assert mgr.latest() is None and mgr.load_latest() is None


def test_flipped_byte_is_skipped_with_event_and_previous_loads(tmp_path: Path) -> None:
    ev = EventWriter(tmp_path / "run", rank=0)
    mgr = CheckpointManager(tmp_path / "ck", events=ev)
    mgr.save(1, make_state(1))
    mgr.save(2, make_state(2))
    shard = tmp_path / "ck" / "step-00000002" / "rank0.pt"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of the tensor payload: size unchanged
    shard.write_bytes(bytes(data))
    info = mgr.latest()
    assert info is not None and info.step == 1
    loaded = mgr.load_latest()
    assert loaded is not None and loaded[0] == 1
    assert_state(loaded[1], 1)
    skipped = [e for e in events_of(tmp_path / "run") if e["status"] == "warn"]
    assert skipped, "no event for the corrupt checkpoint"
    assert "step 2" in skipped[0]["summary"] and "rank0.pt sha256" in skipped[0]["facts"]["reason"]
    assert skipped[0]["facts"]["path"].endswith("step-00000002")


@pytest.mark.parametrize("damage", ["truncate", "no-manifest", "garbage-manifest", "missing-shard",
                                    "manifest-path-escape", "wrong-step"])
def test_damaged_checkpoints_are_never_accepted(tmp_path: Path, damage: str) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep_last=5)
    mgr.save(1, make_state(1))
    mgr.save(2, make_state(2))
    folder = tmp_path / "ck" / "step-00000002"
    man_path = folder / "manifest.json"
    if damage == "truncate":
        shard = folder / "rank0.pt"
        shard.write_bytes(shard.read_bytes()[:-10])
    elif damage == "no-manifest":
        man_path.unlink()
    elif damage == "garbage-manifest":
        man_path.write_text('{"format": "preflight-checkpoint", "vers')
    elif damage == "missing-shard":
        (folder / "rank0.pt").unlink()
    elif damage == "manifest-path-escape":
        man = json.loads(man_path.read_text())
        man["files"]["../step-00000001/rank0.pt"] = man["files"]["rank0.pt"]
        man_path.write_text(json.dumps(man))
    elif damage == "wrong-step":
        man = json.loads(man_path.read_text())
        man["step"] = 3
        man_path.write_text(json.dumps(man))
    assert validate(folder)[0] is None
    info = mgr.latest()
    assert info is not None and info.step == 1
    loaded = mgr.load_latest()
    assert loaded is not None and loaded[0] == 1


def test_staging_folders_are_never_candidates(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck")
    mgr.save(1, make_state(1))
    # a complete-looking copy in a staging folder, with a higher step
    src = tmp_path / "ck" / "step-00000001"
    fake = tmp_path / "ck" / ".staging-9-abcdef"
    fake.mkdir()
    for p in src.iterdir():
        (fake / p.name).write_bytes(p.read_bytes())
    info = mgr.latest()
    assert info is not None and info.step == 1


def test_world_size_mismatch_raises(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck")
    mgr.save(3, make_state(3))
    man_path = tmp_path / "ck" / "step-00000003" / "manifest.json"
    man = json.loads(man_path.read_text())
    man["world_size"] = 2
    man["files"]["rank1.pt"] = man["files"]["rank0.pt"]
    man_path.write_text(json.dumps(man))
    (man_path.parent / "rank1.pt").write_bytes((man_path.parent / "rank0.pt").read_bytes())
    with pytest.raises(CheckpointError, match="2 ranks"):
        mgr.load_latest()


def test_resave_of_an_existing_step_replaces_it(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck")
    mgr.save(4, make_state(4))
    mgr.save(4, make_state(5) | {"step": 4, "w": torch.full((1 << 16,), 4.0)})
    loaded = mgr.load_latest()
    assert loaded is not None and loaded[0] == 4 and loaded[1]["b"].numel() == 5 % 97 + 1


# ------------------------------------------------------------------ rotation, stale cleanup


def test_rotation_keeps_keep_last(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep_last=2)
    for s in range(1, 6):
        mgr.save(s, make_state(s))
        kept = sorted(p.name for p in (tmp_path / "ck").iterdir() if p.name.startswith("step-"))
        assert len(kept) == min(s, 2)
    assert kept == ["step-00000004", "step-00000005"]
    assert not [p for p in (tmp_path / "ck").iterdir() if p.name.startswith((".staging", ".trash"))]


def test_rotation_never_removes_the_last_valid_one(tmp_path: Path) -> None:
    ev = EventWriter(tmp_path / "run", rank=0)
    mgr = CheckpointManager(tmp_path / "ck", keep_last=1, events=ev)
    mgr.save(1, make_state(1))
    # a failing save (state that cannot be pickled): the previous checkpoint stays
    with pytest.raises(CheckpointError):
        mgr.save(2, {"bad": lambda: 0})
    info = mgr.latest()
    assert info is not None and info.step == 1
    assert not (tmp_path / "ck" / "step-00000002").exists()
    # a newer checkpoint from an earlier run exists: saving an older step keeps both, the new
    # one because it was just written
    newer = tmp_path / "ck" / "step-00000050"
    (tmp_path / "ck" / "step-00000001").rename(newer)
    man = json.loads((newer / "manifest.json").read_text())
    man["step"] = 50
    (newer / "manifest.json").write_text(json.dumps(man))
    mgr.save(3, make_state(3))
    names = sorted(p.name for p in (tmp_path / "ck").iterdir() if p.name.startswith("step-"))
    assert names == ["step-00000003", "step-00000050"]
    errors = [e for e in events_of(tmp_path / "run") if e["status"] == "error"]
    assert errors and "step 2" in errors[0]["summary"]


def test_stale_staging_removed_unless_another_writer_holds_the_lock(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    d.mkdir()
    old = d / ".staging-3-0ld"
    fresh = d / ".staging-4-fre5h"
    for p in (old, fresh):
        p.mkdir()
        (p / "rank0.pt").write_bytes(b"partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    # another live writer holds the lock: only the old leftover may go
    fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with CheckpointManager(d, stale_after_s=3600) as mgr:
            mgr.save(1, make_state(1))
        assert not old.exists() and fresh.exists()
    finally:
        os.close(fd)
    # lock free: this manager is the only writer, every leftover goes
    with CheckpointManager(d) as mgr:
        mgr.save(2, make_state(2))
    assert not fresh.exists()


# ------------------------------------------------------------------ async save


def test_async_blocks_for_a_copy_only_and_matches_sync(tmp_path: Path) -> None:
    big: dict[str, Any] = {"w": torch.randn(8 << 20), "v": torch.randn(4 << 20), "step": 0}  # 48 MB
    sync = CheckpointManager(tmp_path / "sync", keep_last=1)
    asy = CheckpointManager(tmp_path / "async", keep_last=1, async_save=True)
    sync_t, async_t = [], []
    for s in range(1, 4):
        sync.save(s, big)
        sync_t.append(sync.stats["blocking_s"])
        asy.save(s, big)
        async_t.append(asy.stats["blocking_s"] - asy.stats["waited_s"])
        asy.wait()
    print(f"\nsave blocking, 48 MB: sync {min(sync_t) * 1e3:.1f} ms, async {min(async_t) * 1e3:.1f} ms")
    assert min(async_t) < 0.5 * min(sync_t)
    # the async snapshot was taken at save(): later changes to the live tensors are not in it
    asy.save(9, big)
    big["w"].add_(1.0)
    asy.wait()
    loaded = asy.load_latest()
    assert loaded is not None and loaded[0] == 9
    assert torch.equal(loaded[1]["w"] + 1.0, big["w"])
    a = asy.latest()
    b = sync.latest()
    assert a is not None and b is not None and a.step == 9 and b.step == 3


def test_async_error_is_reported_and_raised(tmp_path: Path) -> None:
    ev = EventWriter(tmp_path / "run", rank=0)
    mgr = CheckpointManager(tmp_path / "ck", async_save=True, events=ev)
    mgr.save(1, make_state(1))
    mgr.save(2, {"bad": lambda: 0})  # fails in the background
    deadline = time.monotonic() + 10
    while not [e for e in events_of(tmp_path / "run") if e["status"] == "error"]:
        assert time.monotonic() < deadline, "no error event from the background save"
        time.sleep(0.02)
    with pytest.raises(CheckpointError, match="step 2"):
        mgr.save(3, make_state(3))  # the next save raises it
    mgr.save(3, make_state(3))  # reported once; the manager goes on
    mgr.save(4, {"bad": lambda: 0})
    with pytest.raises(CheckpointError, match="step 4"):
        mgr.wait()
    mgr.wait()
    info = mgr.latest()
    assert info is not None and info.step == 3


def test_snapshot_reuses_buffers_and_keeps_sharing(tmp_path: Path) -> None:
    t = torch.randn(100)
    state = {"a": t, "b": t, "l": [torch.zeros(2)], "n": 3}
    pool: dict[tuple[Any, ...], Any] = {}
    s1 = snapshot_to_cpu(state, pool)
    assert s1["a"] is s1["b"] and s1["a"].data_ptr() != t.data_ptr()
    first = s1["a"].data_ptr()
    t.add_(1)
    s2 = snapshot_to_cpu(state, pool)
    assert s2["a"].data_ptr() == first and torch.equal(s2["a"], t)


# ------------------------------------------------------------------ RNG


def test_rng_state_round_trip(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    st = capture_rng_state()
    want = (random.random(), float(np.random.rand()), torch.rand(3))
    mgr = CheckpointManager(tmp_path / "ck")
    mgr.save(1, {"rng": st})
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    loaded = mgr.load_latest()  # weights_only=True: the RNG state is plain data
    assert loaded is not None
    restore_rng_state(loaded[1]["rng"])
    got = (random.random(), float(np.random.rand()), torch.rand(3))
    assert got[0] == want[0] and got[1] == want[1] and torch.equal(got[2], want[2])


# ------------------------------------------------------------------ SIGKILL during saves

STATE_N = 1 << 19  # 2 MB per tensor: a save takes some milliseconds


def _writer(directory: str, start: int, ready: Any) -> None:
    """Child: resumes after the newest complete checkpoint and saves step after step."""
    torch.set_num_threads(1)  # the parent's OpenMP pool does not survive fork
    mgr = CheckpointManager(directory, keep_last=2)
    step = start
    ready.set()
    while True:
        step += 1
        mgr.save(step, make_state(step, STATE_N))


def _killer(directory: str, phase: str, step: int) -> None:
    torch.set_num_threads(1)
    def hook(name: str) -> None:
        if name == phase:
            os.kill(os.getpid(), signal.SIGKILL)

    ck._fault_point = hook
    CheckpointManager(directory, keep_last=2).save(step, make_state(step, STATE_N))
    os._exit(3)  # not reached when the phase is reached


@pytest.mark.real
def test_sigkill_at_random_moments_never_leaves_a_partial_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    with CheckpointManager(d, keep_last=2) as first:
        first.save(1, make_state(1, STATE_N))
    ctx = mp.get_context("fork")
    rnd = random.Random(20240611)
    best = 1
    partial_seen = staging_seen = unfinished_seen = 0
    for _ in range(50):
        ready = ctx.Event()
        child = ctx.Process(target=_writer, args=(str(d), best, ready), daemon=True)
        child.start()
        assert ready.wait(10), "writer did not start"
        time.sleep(rnd.uniform(0.0, 0.06))
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
        leftovers = [p.name for p in d.iterdir() if p.name.startswith((".staging", ".trash"))
                     or (p.name.startswith("step-") and not (p / "manifest.json").exists())]
        partial_seen += bool(leftovers)
        staging_seen += any(n.startswith(".staging") for n in leftovers)
        unfinished_seen += any(n.startswith("step-") for n in leftovers)
        info = CheckpointManager(d).latest()
        assert info is not None, "no valid checkpoint after a kill"
        assert info.step >= best, "the newest valid checkpoint went backwards"
        state = torch.load(info.path / "rank0.pt", weights_only=True)
        assert_state(state, info.step, STATE_N)
        best = info.step
    print(f"\n50 kills: newest valid step {best}; kills that left a partial save behind: {partial_seen} "
          f"(a staging folder: {staging_seen}, a step folder without manifest: {unfinished_seen})")
    assert partial_seen >= 10, "the kills did not land inside saves"
    with CheckpointManager(d, keep_last=2) as mgr:
        mgr.save(best + 1, make_state(best + 1, STATE_N))
    names = sorted(p.name for p in d.iterdir() if p.name != ".lock")
    assert names == [f"step-{best:08d}", f"step-{best + 1:08d}"], names


@pytest.mark.real
@pytest.mark.parametrize("phase,survives", [
    ("staging-created", False), ("shard-written", False), ("shard-synced", False), ("gathered", False),
    ("renamed", False), ("manifest-tmp-written", False), ("manifest-renamed", True), ("rotated", True)])
def test_sigkill_at_each_phase(tmp_path: Path, phase: str, survives: bool) -> None:
    d = tmp_path / "ck"
    with CheckpointManager(d, keep_last=2) as mgr:
        mgr.save(1, make_state(1, STATE_N))
    child = mp.get_context("fork").Process(target=_killer, args=(str(d), phase, 2), daemon=True)
    child.start()
    child.join(20)
    assert child.exitcode == -signal.SIGKILL
    info = CheckpointManager(d).latest()
    assert info is not None and info.step == (2 if survives else 1)
    assert_state(torch.load(info.path / "rank0.pt", weights_only=True), info.step, STATE_N)


# ------------------------------------------------------------------ 4 gloo ranks


def _group_job(rank: int, directory: str, run_dir: str) -> dict[str, Any]:
    ev = EventWriter(run_dir, rank=rank)
    out: dict[str, Any] = {}
    mgr = CheckpointManager(directory, keep_last=2, events=ev)
    for s in (1, 2, 3):
        mgr.save(s, make_state(s * 10 + rank, 1024))
    import torch.distributed as dist

    dist.barrier()
    if rank == 0:  # corrupt rank 3's shard of the newest checkpoint
        shard = Path(directory) / "step-00000003" / "rank3.pt"
        data = bytearray(shard.read_bytes())
        data[-200] ^= 0xFF
        shard.write_bytes(bytes(data))
    dist.barrier()
    loaded = mgr.load_latest()
    assert loaded is not None
    out["loaded_step"] = loaded[0]
    assert_state(loaded[1], loaded[0] * 10 + rank, 1024)
    # one rank's shard cannot be written: every rank raises, no checkpoint 4 appears
    try:
        mgr.save(4, make_state(4, 1024) if rank != 2 else {"bad": lambda: 0})
        out["save4"] = "ok"
    except CheckpointError as exc:
        out["save4"] = str(exc)
    # async in a group: collectives of the save run on their own group, in a thread
    amgr = CheckpointManager(directory, keep_last=2, events=ev, async_save=True)
    amgr.save(5, make_state(50 + rank, 1024))
    t = torch.ones(1)
    dist.all_reduce(t)  # the training loop's own collective meanwhile
    amgr.wait()
    out["after_async"] = amgr.load_latest()[0]  # type: ignore[index]
    amgr.close()
    mgr.close()
    return out


@pytest.mark.real
def test_four_ranks_save_verify_and_agree(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    res = run_ranks(_group_job, 4, args=(str(d), str(tmp_path / "run")), timeout=120)
    assert [res[r]["loaded_step"] for r in range(4)] == [2] * 4  # all fell back together
    assert all("step 4 not saved" in res[r]["save4"] and "rank 2" in res[r]["save4"] for r in range(4))
    assert [res[r]["after_async"] for r in range(4)] == [5] * 4
    man = json.loads((d / "step-00000005" / "manifest.json").read_text())
    assert man["world_size"] == 4 and sorted(man["files"]) == [f"rank{r}.pt" for r in range(4)]
    assert not (d / "step-00000004").exists()
    names = sorted(p.name for p in d.iterdir() if p.name.startswith("step-"))
    assert names == ["step-00000003", "step-00000005"]
    skipped = [e for e in events_of(tmp_path / "run") if e["status"] == "warn" and "step 3" in e["summary"]]
    assert skipped and "rank 3: rank3.pt sha256" in skipped[0]["facts"]["reason"]

"""LocalCheckpointer: node-local atomic saves, verification, rotation, async save, the peer copy
over TCP (two real processes, a real TCPStore, gloo), restore from a peer after the local folder
is lost, bitwise; dead and silent peers; the peer server against bad requests."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import struct
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from preflight.runtime import peercopy as pc
from preflight.runtime import piecehash
from preflight.runtime.checkpoint import CheckpointError, CheckpointManager
from preflight.runtime.events import EventWriter, read_events
from preflight.runtime.localckpt import LocalCheckpointer, job_address, restore, ring_targets
from tests.runtime._checkpoint_ranks import free_port, run_ranks

TOKEN = "test-token"


def make_state(rank: int, step: int, n: int = 1 << 14) -> dict[str, Any]:
    """A state that depends on rank and step, with values only a bitwise compare tells apart
    (NaN payloads, -0.0, denormals, bfloat16)."""
    g = torch.Generator().manual_seed(rank * 1000 + step)
    w = torch.randn(n, generator=g)
    w[:4] = torch.tensor([float("nan"), -0.0, 1e-45, float("-inf")])
    return {"model": {"w": w, "b": torch.randn(7, generator=g).to(torch.bfloat16)},
            "opt": {"m": [torch.arange(step + 3, dtype=torch.int64)], "lr": 0.1 * step},
            "step": step, "rank": rank}


def assert_bitwise(got: Any, want: Any) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for k in want:
            assert_bitwise(got[k], want[k])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert_bitwise(a, b)
    else:
        assert got == want


def events_of(run: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(run) if e["check"] == "runtime.checkpoint"]


def solo(tmp_path: Path, name: str = "local", **kw: Any) -> LocalCheckpointer:
    return LocalCheckpointer(tmp_path / name, rank=0, world_size=1, events=EventWriter(tmp_path / "run", rank=0),
                             token=TOKEN, **kw)


# ------------------------------------------------------------------ pure parts


def test_ring_targets_same_local_rank_on_the_next_nodes() -> None:
    # 2 nodes of 8: node 0's local rank 3 replicates to node 1's local rank 3 and back
    assert ring_targets(3, 16, 8, 1) == [11]
    assert ring_targets(11, 16, 8, 1) == [3]
    # 3 nodes, replication factor 2: the next two nodes, wrapping around
    assert ring_targets(17, 24, 8, 2) == [1, 9]
    # more replicas than other nodes: every other node once; one node: nobody
    assert ring_targets(0, 16, 8, 5) == [8]
    assert ring_targets(2, 8, 8, 1) == []
    with pytest.raises(ValueError):
        ring_targets(0, 10, 8, 1)


def test_job_address_is_the_interface_toward_master_addr() -> None:
    assert job_address("127.0.0.1") == "127.0.0.1"
    assert job_address("") == "127.0.0.1"
    assert job_address("no-such-host.invalid") == "127.0.0.1"


def reference_digest(data: bytes, piece: int = piecehash.PIECE) -> str:
    """The piece digest computed the plain way: sha256 of each piece, then of their digests."""
    parts = [hashlib.sha256(data[i:i + piece]).digest() for i in range(0, len(data), piece)] or \
        [hashlib.sha256(b"").digest()]
    return hashlib.sha256(b"".join(parts)).hexdigest()


@pytest.mark.parametrize("size", [0, 1, piecehash.PIECE - 1, piecehash.PIECE, 3 * piecehash.PIECE + 12345])
def test_the_piece_digest_does_not_depend_on_how_the_bytes_were_cut(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    want = reference_digest(data)
    assert piecehash.digest_bytes(data) == want
    rng = random.Random(size)
    for _ in range(3):  # writes of random sizes, small (hashed inline) and large (the pool), across pieces
        path = tmp_path / f"f{rng.random()}"
        with open(path, "xb", buffering=0) as raw:
            hf = piecehash.PieceHashingFile(raw)
            pos = 0
            while pos < size:
                n = rng.choice([1, 100, 1 << 17, 1 << 20, 5 << 20, 9 << 20, 20 << 20])
                hf.write(memoryview(data)[pos:pos + n])
                pos += n
        assert hf.hash.hexdigest() == want and hf.size == size
        assert path.read_bytes() == data


# ------------------------------------------------------------------ local saves


def test_save_layout_manifest_and_bitwise_load(tmp_path: Path) -> None:
    with solo(tmp_path) as lc:
        lc.save(7, make_state(0, 7))
        folder = tmp_path / "local" / "rank0" / "step-00000007"
        assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "rank0.pt"]
        man = json.loads((folder / "manifest.json").read_text())
        data = (folder / "rank0.pt").read_bytes()
        assert man["files"]["rank0.pt"] == {"sha256": reference_digest(data), "size": len(data)}
        assert man["hash"] == "sha256-pieces-4MiB"
        assert man["step"] == 7 and man["rank"] == 0 and man["format"] == pc.LOCAL_FORMAT
        assert not [p for p in (tmp_path / "local" / "rank0").iterdir() if p.name.startswith(".")]
        got = lc.load_latest()
    assert got is not None and got[0] == 7
    assert_bitwise(got[1], make_state(0, 7))
    ev = events_of(tmp_path / "run")
    saved = [e for e in ev if "saved" in e["summary"]]
    assert saved[0]["status"] == "pass" and saved[0]["facts"]["bytes"] == len(data)
    assert saved[0]["facts"]["where"] == "local"
    resumed = [e for e in ev if "resumed" in e["summary"]]
    assert resumed[0]["facts"]["restored_from"] == "local" and resumed[0]["facts"]["step"] == 7


def test_empty_or_missing_folder_gives_none(tmp_path: Path) -> None:
    with solo(tmp_path) as lc:
        assert lc.load_latest() is None and lc.local_steps() == []


def test_rotation_keeps_the_last_k(tmp_path: Path) -> None:
    with solo(tmp_path, keep_last=2) as lc:
        for step in (1, 2, 3, 4):
            lc.save(step, make_state(0, step, 64))
        assert lc.wait_copies(30)  # rotation runs in the background, after the copies
        assert lc.local_steps() == [4, 3]
        assert sorted(p.name for p in (tmp_path / "local" / "rank0").iterdir()) == ["step-00000003", "step-00000004"]


def test_saving_an_older_step_drops_the_newer_ones_locally_and_at_the_peer(tmp_path: Path) -> None:
    """After the job went back to step 15 (a restore), steps 20 and 30 belong to an abandoned
    timeline: they must not outlive the next save, locally or as copies."""
    a, b = pair(tmp_path, keep_last=3)
    try:
        for step in (10, 20, 30, 15):
            a.save(step, make_state(0, step, 64))
            assert a.wait_copies(30)
        assert a.local_steps() == [15, 10]
        assert b.server.steps(0) == [15, 10]
    finally:
        a.close()
        b.close()


def test_flipped_byte_is_skipped_with_an_event_and_the_previous_step_loads(tmp_path: Path) -> None:
    with solo(tmp_path) as lc:
        lc.save(1, make_state(0, 1))
        lc.save(2, make_state(0, 2))
        shard = tmp_path / "local" / "rank0" / "step-00000002" / "rank0.pt"
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 2] ^= 0x10  # same size: only the sha256 tells
        shard.write_bytes(bytes(raw))
        got = lc.load_latest()
        assert lc.local_steps() == [1]  # the damaged newer step is gone: training goes on from 1
    assert got is not None and got[0] == 1
    assert_bitwise(got[1], make_state(0, 1))
    warns = [e for e in events_of(tmp_path / "run") if e["status"] == "warn"]
    assert any("step 2 not restored" in e["summary"] and "sha256" in e["summary"] for e in warns), warns


@pytest.mark.parametrize("damage", ["torn", "missing", "garbage", "other-step", "short-shard"])
def test_bad_manifest_or_shard_is_skipped_with_the_reason(tmp_path: Path, damage: str) -> None:
    with solo(tmp_path) as lc:
        lc.save(1, make_state(0, 1, 64))
        lc.save(2, make_state(0, 2, 64))
        folder = tmp_path / "local" / "rank0" / "step-00000002"
        man = folder / "manifest.json"
        text = man.read_text()
        if damage == "torn":
            man.write_text(text[: len(text) // 2])
        elif damage == "missing":
            man.unlink()
        elif damage == "garbage":
            man.write_text("[1, 2, 3]")
        elif damage == "other-step":
            man.write_text(text.replace('"step": 2', '"step": 3'))
        else:
            shard = folder / "rank0.pt"
            shard.write_bytes(shard.read_bytes()[:-10])
        assert lc.local_steps() == [1]
        got = lc.load_latest()
    assert got is not None and got[0] == 1
    skipped = [e for e in events_of(tmp_path / "run") if "step 2 skipped" in e["summary"]]
    assert len(skipped) == 1 and skipped[0]["status"] == "warn" and skipped[0]["facts"]["reason"]


def test_leftovers_of_a_crashed_save_are_removed_and_never_loaded(tmp_path: Path) -> None:
    own = tmp_path / "local" / "rank0"
    (own / ".staging-9-abc").mkdir(parents=True)
    (own / ".staging-9-abc" / "rank0.pt").write_bytes(b"half")
    with solo(tmp_path) as lc:
        assert not (own / ".staging-9-abc").exists()
        assert lc.load_latest() is None


def test_a_failed_local_write_raises_checkpoint_error_with_an_event(tmp_path: Path) -> None:
    with solo(tmp_path) as lc:
        with pytest.raises(CheckpointError):
            lc.save(1, {"bad": threading.Lock()})  # torch.save cannot pickle a lock
        lc.save(2, make_state(0, 2, 64))  # the next save works
        assert lc.local_steps() == [2]
    errors = [e for e in events_of(tmp_path / "run") if e["status"] == "error"]
    assert errors and "step 1 not saved" in errors[0]["summary"]


def test_async_save_snapshots_the_state_before_returning(tmp_path: Path) -> None:
    state = make_state(0, 5)
    want = make_state(0, 5)
    with solo(tmp_path, async_save=True) as lc:
        lc.save(5, state)
        state["model"]["w"].fill_(123.0)  # the training loop goes on changing its tensors
        lc.wait()
        got = lc.load_latest()
    assert got is not None and got[0] == 5
    assert_bitwise(got[1], want)


# ------------------------------------------------------------------ peer copies (one process)


def pair(tmp_path: Path, **kw: Any) -> tuple[LocalCheckpointer, LocalCheckpointer]:
    ev = [EventWriter(tmp_path / "run", rank=r) for r in (0, 1)]
    a = LocalCheckpointer(tmp_path / "A", rank=0, world_size=2, local_world_size=1, events=ev[0], token=TOKEN, **kw)
    b = LocalCheckpointer(tmp_path / "B", rank=1, world_size=2, local_world_size=1, events=ev[1], token=TOKEN,
                          peers={0: a.address}, **kw)
    a.peers[1] = b.address
    return a, b


def test_a_corrupt_peer_copy_is_refused_and_an_older_step_restores(tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    try:
        for step in (1, 2):
            a.save(step, make_state(0, step))
            assert a.wait_copies(30)
        copy = tmp_path / "B" / "peers" / "rank0" / "step-00000002" / "rank0.pt"
        raw = bytearray(copy.read_bytes())
        raw[100] ^= 1
        copy.write_bytes(bytes(raw))
        shutil.rmtree(tmp_path / "A" / "rank0")  # the node lost its local folder
        a2 = LocalCheckpointer(tmp_path / "A", rank=0, world_size=2, local_world_size=1, token=TOKEN,
                               peers={1: b.address}, events=EventWriter(tmp_path / "run", rank=0))
        try:
            got = a2.load_latest()
        finally:
            a2.close()
    finally:
        a.close()
        b.close()
    assert got is not None and got[0] == 1
    assert_bitwise(got[1], make_state(0, 1))
    warns = [e for e in events_of(tmp_path / "run") if "step 2 not restored" in e["summary"]]
    assert warns and "rank0.pt from the peer: sha256" in warns[0]["summary"]  # refused on arrival
    # the copy fetched back was written to the local folder: the next restore is local
    assert (tmp_path / "A" / "rank0" / "step-00000001" / "rank0.pt").exists()


def test_two_replicas_and_a_restore_when_the_first_holder_is_gone(tmp_path: Path) -> None:
    """Replication factor 2 over 3 nodes: rank 0's shard is kept by ranks 1 and 2; after node 0
    is replaced and rank 1 is down, the restore fetches from rank 2."""
    ev = [EventWriter(tmp_path / "run", rank=r) for r in range(3)]
    cks = [LocalCheckpointer(tmp_path / f"n{r}", rank=r, world_size=3, local_world_size=1, replicas=2,
                             events=ev[r], token=TOKEN) for r in range(3)]
    try:
        for c in cks:
            c.peers = {r: cks[r].address for r in range(3) if r != c.rank}
        assert cks[0].targets == [1, 2] and cks[2].targets == [0, 1]
        cks[0].save(4, make_state(0, 4))
        assert cks[0].wait_copies(30)
        assert cks[1].server.steps(0) == [4] and cks[2].server.steps(0) == [4]
        cks[1].close()
        shutil.rmtree(tmp_path / "n0" / "rank0")
        got = cks[0].load_latest()
    finally:
        for c in cks:
            c.close()
    assert got is not None and got[0] == 4
    assert_bitwise(got[1], make_state(0, 4))
    evs = events_of(tmp_path / "run")
    assert any(e["rank"] == 0 and "copies held by rank 1 not listed" in e["summary"] for e in evs)
    resumed = [e for e in evs if "resumed" in e["summary"]]
    assert resumed[0]["facts"]["restored_from"].startswith("peer rank 2 (")


def test_a_failed_background_write_is_raised_by_the_next_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with solo(tmp_path, async_save=True) as lc:
        def disk_full(*a: Any, **k: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(pc, "publish", disk_full)
        lc.save(1, make_state(0, 1, 64))  # returns once the state is copied
        with pytest.raises(CheckpointError, match="No space left"):
            lc.save(2, make_state(0, 2, 64))
        monkeypatch.undo()
        lc.save(3, make_state(0, 3, 64))
        lc.wait()
        assert lc.local_steps() == [3]
        assert not [p for p in (tmp_path / "local" / "rank0").iterdir() if p.name.startswith(".staging")]
    errors = [e for e in events_of(tmp_path / "run") if e["status"] == "error"]
    assert errors and "step 1 not saved" in errors[0]["summary"]


def test_a_step_not_made_durable_is_neither_copied_nor_rotates_older_ones_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair(tmp_path, keep_last=1)
    try:
        a.save(1, make_state(0, 1, 64))
        assert a.wait_copies(30) and b.server.steps(0) == [1]

        def io_error(*args: Any) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(pc, "settle", io_error)
        a.save(2, make_state(0, 2, 64))
        assert a.wait_copies(30)
        assert a.local_steps() == [2, 1] and b.server.steps(0) == [1]
    finally:
        monkeypatch.undo()
        a.close()
        b.close()
    warn = [e for e in events_of(tmp_path / "run") if "not made durable" in e["summary"]]
    assert len(warn) == 1 and warn[0]["facts"]["step"] == 2


def test_a_dead_peer_is_an_event_and_saves_go_on(tmp_path: Path) -> None:
    dead = free_port()  # nothing listens there
    with solo(tmp_path, timeout_s=2.0) as lc:
        lc.targets = [1]
        lc.peers = {1: f"127.0.0.1:{dead}"}
        for step in (1, 2, 3):
            lc.save(step, make_state(0, step, 256))
            assert lc.wait_copies(20)
        assert lc.local_steps()[:1] == [3]
    failed = [e for e in events_of(tmp_path / "run") if "copy" in e["summary"] and e["status"] == "warn"]
    assert len(failed) == 3 and all("cannot connect" in e["facts"]["error"] for e in failed)
    assert failed[0]["facts"]["peer"] == f"127.0.0.1:{dead}" and failed[0]["facts"]["peer_rank"] == 1


def test_a_silent_peer_is_abandoned_within_the_timeout(tmp_path: Path) -> None:
    """A peer that accepts the connection (the kernel's backlog) and never answers: the copy
    thread gives up after its timeout, the save itself never waits for it."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        with solo(tmp_path, timeout_s=1.0) as lc:
            lc.targets = [1]
            lc.peers = {1: f"127.0.0.1:{silent.getsockname()[1]}"}
            lc.save(1, make_state(0, 1, 64))
            assert lc.local_steps() == [1]  # durable locally before the copy finished
            assert lc.wait_copies(30)
    finally:
        silent.close()
    failed = [e for e in events_of(tmp_path / "run") if "copy" in e["summary"] and e["status"] == "warn"]
    assert len(failed) == 1 and "timed out" in failed[0]["facts"]["error"]


def test_a_server_that_cannot_listen_is_an_error_event_and_local_saves_go_on(tmp_path: Path) -> None:
    with solo(tmp_path, bind_host="192.0.2.1") as lc:  # TEST-NET-1: not an address of this machine
        assert lc.server is None and lc.address == ""
        lc.save(1, make_state(0, 1, 64))
        got = lc.load_latest()
    assert got is not None and got[0] == 1
    errors = [e for e in events_of(tmp_path / "run") if e["status"] == "error"]
    assert len(errors) == 1 and "not started on 192.0.2.1:0" in errors[0]["summary"]


def test_an_unpublished_peer_address_is_waited_for_a_bounded_time(tmp_path: Path) -> None:
    store = torch.distributed.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=30))
    with LocalCheckpointer(tmp_path / "A", rank=0, world_size=2, local_world_size=1, store=store, lookup_s=0.5,
                           events=EventWriter(tmp_path / "run", rank=0)) as lc:
        assert store.check(["preflight/localckpt/0/rank0"])
        lc.save(1, make_state(0, 1, 64))
        assert lc.wait_copies(20)
    failed = [e for e in events_of(tmp_path / "run") if "copy" in e["summary"] and e["status"] == "warn"]
    assert len(failed) == 1 and "published no address within 0.5 s" in failed[0]["facts"]["error"]


# ------------------------------------------------------------------ the peer server against bad input


def _raw_request(addr: str, payload: bytes) -> dict[str, Any]:
    host, port = pc.parse_addr(addr)
    with socket.create_connection((host, port), timeout=10) as s:
        s.settimeout(10)
        s.sendall(payload)
        return pc.recv_msg(s)


def _header(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def test_the_peer_server_answers_bad_requests_and_keeps_serving(tmp_path: Path) -> None:
    with solo(tmp_path) as lc:
        addr = lc.address
        assert not _raw_request(addr, _header({"op": "list", "token": "wrong", "rank": 0}))["ok"]
        assert "header of" in _raw_request(addr, struct.pack(">I", 1 << 30))["error"]
        assert "not JSON" in _raw_request(addr, struct.pack(">I", 3) + b"{{{")["error"]
        assert "unknown request" in _raw_request(addr, _header({"op": "rm", "token": TOKEN, "rank": 0}))["error"]
        assert "bad rank" in _raw_request(addr, _header({"op": "list", "token": TOKEN, "rank": "../x"}))["error"]
        man = pc.make_manifest(3, 0, 2, "0" * 64, 5)
        bad_sha = _header({"op": "put", "token": TOKEN, "rank": 0, "step": 3, "manifest": man, "size": 5,
                           "sha256": "0" * 64}) + b"hello"
        assert "sha256" in _raw_request(addr, bad_sha)["error"]
        assert not (tmp_path / "local" / "peers" / "rank0" / "step-00000003").exists()
        assert not list((tmp_path / "local" / "peers" / "rank0").iterdir())  # no staging left behind
        assert "no valid copy" in _raw_request(addr, _header({"op": "get", "token": TOKEN, "rank": 0,
                                                              "step": 3}))["error"]
        ok = _raw_request(addr, _header({"op": "list", "token": TOKEN, "rank": 0}))
        assert ok == {"ok": True, "steps": []}
    refused = [e for e in events_of(tmp_path / "run") if "refused" in e["summary"]]
    assert refused and refused[0]["facts"]["step"] == 3


def test_a_truncated_upload_leaves_nothing_behind(tmp_path: Path) -> None:
    with solo(tmp_path, timeout_s=2.0) as lc:
        man = pc.make_manifest(4, 0, 2, hashlib.sha256(b"x" * 1000).hexdigest(), 1000)
        host, port = pc.parse_addr(lc.address)
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(_header({"op": "put", "token": TOKEN, "rank": 0, "step": 4, "manifest": man, "size": 1000,
                               "sha256": man["files"]["rank0.pt"]["sha256"]}) + b"x" * 10)
            s.shutdown(socket.SHUT_WR)  # the sender died after 10 of 1000 bytes
            reply = pc.recv_msg(s)
        assert not reply["ok"] and "closed after 10 of 1000" in reply["error"]
        assert lc.server.steps(0) == []
        assert not list((tmp_path / "local" / "peers" / "rank0").iterdir())


# ------------------------------------------------------------------ two processes, gloo, TCPStore


def _two_rank_job(rank: int, root: str, store_port: int) -> dict[str, Any]:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", store_port, 2, rank == 0, timeout=timedelta(seconds=30))
    run = Path(root) / "run"
    local = Path(root) / f"node{rank}"  # each rank stands for a node with its own local disk
    lc = LocalCheckpointer(local, store=store, local_world_size=1, events=EventWriter(run, rank=rank))
    assert (lc.rank, lc.world_size, lc.targets) == (rank, 2, [1 - rank])
    for step in (10, 20, 30):
        lc.save(step, make_state(rank, step))
    copied = lc.wait_copies(60)
    dist.barrier()
    lc.close()
    if rank == 0:
        shutil.rmtree(local)  # node 0 is replaced: its local disk is empty
    dist.barrier()
    # the job restarts: every rank constructs again and restores
    lc2 = LocalCheckpointer(local, store=store, local_world_size=1, events=EventWriter(run, rank=rank),
                            keep_last=3)
    # every rank has published its new server before any asks (this stands for a new attempt of
    # the job, whose keys are its own; here both run in one attempt, where the previous servers'
    # addresses are still in the store until each rank publishes again)
    dist.barrier()
    where = lc2.restorable()
    got = lc2.load_latest()
    dist.barrier()
    lc2.close()
    assert got is not None
    assert_bitwise(got[1], make_state(rank, 30))
    return {"copied": copied, "step": got[0], "where": {k: v for k, v in where.items()}}


@pytest.mark.real
def test_two_processes_copy_to_each_other_and_restore_bitwise_after_a_node_loss(tmp_path: Path) -> None:
    out = run_ranks(_two_rank_job, 2, args=(str(tmp_path), free_port()), timeout=120)
    assert out[0]["copied"] and out[1]["copied"]
    assert out[0]["step"] == out[1]["step"] == 30
    # only the peer's copies (a copy still pending when a newer save comes is skipped)
    assert out[0]["where"][30] == [1] and all(v == [1] for v in out[0]["where"].values())
    assert out[1]["where"] == {30: [None], 20: [None]}  # its copies were on the lost node
    ev = events_of(tmp_path / "run")
    resumed = {e["rank"]: e["facts"]["restored_from"] for e in ev if "resumed" in e["summary"]}
    assert resumed[0].startswith("peer rank 1 (127.0.0.1:") and resumed[1] == "local"
    copies = [e for e in ev if "copied to rank" in e["summary"]]
    assert {e["rank"] for e in copies} == {0, 1} and all(e["facts"]["bytes"] > 0 for e in copies)
    # both ranks are on this host: the copy does not survive losing it, and that is said
    same = [e for e in ev if "runs on this node" in e["summary"]]
    assert same and same[0]["status"] == "warn"


def _disagreeing_steps(rank: int, root: str) -> Any:
    lc = LocalCheckpointer(Path(root) / f"node{rank}", local_world_size=1, replicas=0)
    try:
        return lc.agree_step([10, 20, 30] if rank == 0 else [10, 20, 25])
    finally:
        lc.close()


@pytest.mark.real
def test_ranks_agree_on_the_newest_step_every_rank_has(tmp_path: Path) -> None:
    assert run_ranks(_disagreeing_steps, 2, args=(str(tmp_path),), timeout=60) == {0: 20, 1: 20}


# ------------------------------------------------------------------ with shared storage


def test_restore_takes_the_newest_of_local_and_shared(tmp_path: Path) -> None:
    with solo(tmp_path) as lc, CheckpointManager(tmp_path / "shared") as shared:
        assert restore(lc, shared) is None
        shared.save(100, make_state(0, 100))
        lc.save(120, make_state(0, 120))
        step, state, tier = restore(lc, shared) or (None, None, None)
        assert (step, tier) == (120, "local")
        assert_bitwise(state, make_state(0, 120))
        shared.save(200, make_state(0, 200))
        got = restore(lc, shared)
        assert got is not None and got[0] == 200 and got[2] == "shared"
        shutil.rmtree(tmp_path / "local" / "rank0")
        (tmp_path / "shared" / "step-00000200" / "rank0.pt").write_bytes(b"garbage")
        got = restore(lc, shared)
        assert got is not None and (got[0], got[2]) == (100, "shared")


def test_nothing_blocks_at_close_with_a_copy_pending(tmp_path: Path) -> None:
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        lc = solo(tmp_path, timeout_s=1.0)
        lc.targets = [1]
        lc.peers = {1: f"127.0.0.1:{silent.getsockname()[1]}"}
        lc.save(1, make_state(0, 1, 64))
        t0 = time.monotonic()
        lc.close()
        assert time.monotonic() - t0 < 30  # bounded by the copy's timeout, not forever
    finally:
        silent.close()
    assert os.path.exists(tmp_path / "local" / "rank0" / "step-00000001")


def test_a_forked_child_hashes_with_a_pool_of_its_own() -> None:
    """The pool's threads do not survive a fork: a child that used the parent's pool hung."""
    data = os.urandom(9 << 20)
    parent = piecehash.digest_bytes(data)  # the parent's pool exists before the fork
    pid = os.fork()
    if pid == 0:  # the child: hash, report through the exit code
        try:
            os._exit(0 if piecehash.digest_bytes(data) == parent else 3)
        except BaseException:
            os._exit(4)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung hashing")

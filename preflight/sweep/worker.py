"""The processes of a sweep: one agent per node, which starts that node's ranks, and the ranks.

    python -m preflight.sweep.worker agent --spec B64 --node n1 --node-rank 0 --nproc 8 \\
        --world 16 --master-addr 10.0.0.1 --master-port 29533
    python -m preflight.sweep.worker rank --spec B64     (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* set)

Ranks print `@@pfsweep {json}` event lines; the agent forwards them and wraps every other
line (NCCL_DEBUG output, tracebacks) into a `log` event with the rank. Every step is bounded:
the process-group timeout ends a stuck collective, each rank exits by the spec's deadline,
and the agent kills its ranks at the deadline or when its stdin closes (the launcher or the
SSH session went away). torch is imported by the ranks only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from preflight import procs as procs_mod
from preflight.sweep import pairs as pairmod
from preflight.sweep.spec import EVENT_MARK, SweepSpec, busbw_factor, event_line

UNFIT_EXIT = 3  # the agent's exit code when its interpreter cannot run the ranks (no torch)
UNFIT_LINGER_S = 4.0  # under srun, how long a node without torch waits before its exit ends the step

_out_lock = threading.Lock()
_state: dict[str, Any] = {"phase": "start", "bytes": None}


def emit(ev: str, **fields: Any) -> None:
    with _out_lock:
        sys.stdout.write(event_line(ev, **fields) + "\n")
        sys.stdout.flush()


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:400]


# ----------------------------------------------------------------------------------------
# agent


def torch_missing() -> str:
    """Why the ranks could not import torch with this interpreter ('' when they can). Only
    looks for the module: importing torch takes seconds, the agent must answer at once."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError) as exc:
        return f"torch cannot be found: {_short(exc)}"
    if found:
        return ""
    return (f"No module named 'torch' for {sys.executable} "
            f"(Python {sys.version_info.major}.{sys.version_info.minor})")


def _announce(node: str, nproc: int, beat_s: float = 0.0) -> bool:
    """The agent's first line: who it is and whether its interpreter has torch. Without
    torch it says so (`unfit`) and the caller exits: the launcher reports the node at once
    instead of its peers waiting for ranks that never come."""
    missing = torch_missing()
    emit("agent", node=node, nproc=nproc, pid=os.getpid(), host=socket.gethostname(), python=sys.executable,
         torch=not missing, beat_s=beat_s)
    if missing:
        emit("unfit", node=node, python=sys.executable, missing="torch", error=missing)
    return not missing


def _heartbeat(node: str, every_s: float, stop: threading.Event) -> None:
    """A small line every few seconds: the launcher tells a silent link (black hole, hung
    session) from ranks busy importing torch or waiting in a collective."""
    while not stop.wait(every_s):
        emit("beat", node=node)


def _deadline(spec: SweepSpec, start: float) -> float:
    """The monotonic time by which the sweep must end: its own bound, or the launcher's wall
    clock deadline when that comes first (never less than a second away)."""
    deadline = start + spec.deadline_s
    if spec.deadline_epoch:
        deadline = min(deadline, start + max(1.0, spec.deadline_epoch - time.time()))
    return deadline


def _rank_env(args: argparse.Namespace, spec: SweepSpec, local: int) -> dict[str, str]:
    """The environment of one local rank: torch.distributed's variables and the sweep's own."""
    env = dict(os.environ)
    env.update({"RANK": str(args.node_rank * args.nproc + local), "WORLD_SIZE": str(args.world),
                "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(args.nproc), "GROUP_RANK": str(args.node_rank),
                "MASTER_ADDR": args.master_addr, "MASTER_PORT": str(args.master_port),
                "PREFLIGHT_NODE": args.node, "PYTHONUNBUFFERED": "1"})
    if spec.socket_ifname:
        env["GLOO_SOCKET_IFNAME"] = spec.socket_ifname
        env["NCCL_SOCKET_IFNAME"] = spec.socket_ifname
    if spec.backend == "nccl" and spec.nccl_debug:
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV")
    return env


def _start_ranks(args: argparse.Namespace, spec: SweepSpec) -> tuple[list[subprocess.Popen[bytes]],
                                                                       list[threading.Thread]]:
    """The node's ranks, each in a process group of its own, their output forwarded as events."""
    procs: list[subprocess.Popen[bytes]] = []
    threads: list[threading.Thread] = []
    for local in range(args.nproc):
        p = procs_mod.spawn([sys.executable, "-m", "preflight.sweep.worker", "rank", "--spec", args.spec],
                            env=_rank_env(args, spec, local), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
        procs.append(p)
        t = threading.Thread(target=_forward, args=(p, args.node_rank * args.nproc + local, args.node), daemon=True)
        t.start()
        threads.append(t)
    return procs, threads


def _wait_ranks(procs: list[subprocess.Popen[bytes]], gone: threading.Event, deadline: float,
                spec: SweepSpec) -> str:
    """Wait for the ranks to end; why they must be ended instead ("" when they all ended)."""
    while any(p.poll() is None for p in procs):
        if gone.is_set():
            return "the launcher went away (stdin closed)"
        if time.monotonic() > deadline:
            return f"deadline of {spec.deadline_s:g} s reached"
        time.sleep(0.1)
    return ""


def agent_main(args: argparse.Namespace) -> int:
    spec = SweepSpec.decode(args.spec)
    deadline = _deadline(spec, time.monotonic())
    if not _announce(args.node, args.nproc, spec.heartbeat_s):
        return UNFIT_EXIT
    stop_beat = threading.Event()
    if spec.heartbeat_s > 0:
        threading.Thread(target=_heartbeat, args=(args.node, spec.heartbeat_s, stop_beat), daemon=True).start()
    procs, threads = _start_ranks(args, spec)
    gone = threading.Event()
    if args.watch_stdin:
        threading.Thread(target=_watch_stdin, args=(gone,), daemon=True).start()
    why = _wait_ranks(procs, gone, deadline, spec)
    if why:
        for p in procs:
            _kill(p)
        emit("agent_kill", node=args.node, reason=why)
    for t in threads:
        t.join(timeout=2)
    stop_beat.set()
    for local, p in enumerate(procs):
        rc = p.poll()
        emit("rank_exit", node=args.node, rank=args.node_rank * args.nproc + local, rc=rc)
    return 0


def torchrun_main(argv: list[str]) -> int:
    """Inside an allocation srun starts this on every node: it answers like an agent (node,
    interpreter, torch) and then becomes torchrun with the given arguments."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    nproc = next((a.split("=", 1)[1] for a in argv if a.startswith("--nproc-per-node=")), "1")
    if not _announce(node, int(nproc) if nproc.isdigit() else 1):
        # srun ends every task as soon as one fails: stay a moment, so that the other nodes
        # answer too (the launcher stops the step once everyone has, or after its grace)
        time.sleep(UNFIT_LINGER_S)
        return UNFIT_EXIT
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv])
    return 0  # not reached


def _forward(p: subprocess.Popen[bytes], rank: int, node: str) -> None:
    assert p.stdout is not None
    for raw in iter(p.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if EVENT_MARK in line:
            with _out_lock:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        elif line.strip():
            emit("log", rank=rank, node=node, line=line[:2000])


def _watch_stdin(gone: threading.Event) -> None:
    try:  # the raw descriptor: a buffered reader blocked here makes interpreter shutdown abort
        while os.read(0, 4096):
            pass
    except (OSError, ValueError):
        pass
    gone.set()


def _kill(p: subprocess.Popen[bytes]) -> None:
    """End a rank and whatever it started at once (no grace: it is past its deadline, or its
    launcher is gone)."""
    if p.poll() is not None:
        return
    procs_mod.stop_group(p, grace_s=0.0)


# ----------------------------------------------------------------------------------------
# rank


def _watchdog(deadline_mono: float, rank: int) -> None:
    while time.monotonic() < deadline_mono:
        time.sleep(0.2)
    emit("deadline", rank=rank, phase=_state["phase"], bytes=_state["bytes"])
    os._exit(124)


def rank_main(args: argparse.Namespace) -> int:
    spec = SweepSpec.decode(args.spec)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    node = os.environ.get("PREFLIGHT_NODE") or socket.gethostname()
    start = time.monotonic()
    deadline = _deadline(spec, start)
    threading.Thread(target=_watchdog, args=(deadline, rank), daemon=True).start()
    try:
        _rank_body(spec, rank, world, local, node)
    except Exception as exc:  # reported, never a traceback lost in a log
        emit("error", rank=rank, node=node, phase=_state["phase"], bytes=_state["bytes"], error=_short(exc))
        sys.stdout.flush()
        os._exit(1)
    emit("done", rank=rank, node=node, seconds=round(time.monotonic() - start, 3))
    sys.stdout.flush()
    os._exit(0)  # never wait on a process group's threads that a stalled peer still holds


@dataclass
class _Rank:
    """One rank of the sweep once its process group is up: what every phase measures with."""

    spec: SweepSpec
    rank: int
    world: int
    node: str
    torch: Any
    dist: Any
    device: Any
    dtype: Any
    order: list[str]  # the sweep's nodes, in the spec's order
    leader: dict[str, int]  # node -> its lowest rank, the one that runs its pairs

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def _rank_body(spec: SweepSpec, rank: int, world: int, local: int, node: str) -> None:
    me = _join(spec, rank, world, local, node)
    group_ok, peak = _allreduce_sweep(me) if spec.allreduce else (True, 0.0)
    below = bool(spec.group_floor_busbw and peak and peak < spec.group_floor_busbw)
    if len(me.order) < 2 or me.leader.get(node) != rank:
        return
    _pair_rounds(me, group_ok, below)


def _join(spec: SweepSpec, rank: int, world: int, local: int, node: str) -> _Rank:
    """Say hello, join the process group, learn every rank's node."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    _state["phase"] = "init"
    device = torch.device("cpu")
    if spec.backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    emit("hello", rank=rank, world=world, local_rank=local, node=node, host=socket.gethostname(),
         backend=spec.backend, device=str(device), pid=os.getpid(), torch=torch.__version__,
         model=torch.cuda.get_device_name(local) if spec.backend == "nccl" else "cpu")
    timeout = timedelta(seconds=spec.op_timeout_s)
    dist.init_process_group(spec.backend, init_method="env://", rank=rank, world_size=world, timeout=timeout)
    node_of: list[Any] = [None] * world
    dist.all_gather_object(node_of, node)
    order = [n for n in spec.nodes if n in node_of] or list(dict.fromkeys(node_of))
    leader = {n: node_of.index(n) for n in order}
    emit("ready", rank=rank, node=node, nodes=order)
    return _Rank(spec=spec, rank=rank, world=world, node=node, torch=torch, dist=dist, device=device,
                 dtype=getattr(torch, spec.dtype), order=order, leader=leader)


def _allreduce_sweep(me: _Rank) -> tuple[bool, float]:
    """All-reduce over every size (rank 0 emits the rows); (every size completed, the peak
    busbw from the group-floor size on)."""
    spec, torch, dist, rank, dtype = me.spec, me.torch, me.dist, me.rank, me.dtype
    peak = 0.0
    for size in spec.sizes():
        _state.update(phase="allreduce", bytes=size)
        emit("begin", rank=rank, phase="allreduce", bytes=size)
        try:
            row = _measure_allreduce(torch, dist, size, dtype, me.device, spec, rank, me.world, me.sync)
        except Exception as exc:
            emit("stall", rank=rank, node=me.node, phase="allreduce", bytes=size, error=_short(exc))
            return False, peak
        emit("end", rank=rank, phase="allreduce", bytes=size)
        if rank == 0:
            emit("row", **row)
        for k in range(spec.calibrate):  # alternate sweep and bare-loop blocks, same buffers
            bare = _bare_loop(torch, dist, size, dtype, me.device, spec, me.sync)
            again = _measure_allreduce(torch, dist, size, dtype, me.device, spec, rank, me.world, me.sync) \
                if k else row
            if rank == 0:
                emit("calib", bytes=size, bare_us=bare * 1e6, median_us=again["median_us"], mean_us=again["time_us"])
        if spec.group_floor_min_bytes and size >= spec.group_floor_min_bytes:
            peak = max(peak, row["busbw"])
    return True, peak


def _pair_rounds(me: _Rank, group_ok: bool, below: bool) -> None:
    """The node leaders' ping-pong: the planned rounds (ring, all pairs, or a ring when the
    all-reduce failed or fell below the group floor and isolation is on), then isolation rounds
    until the bad node or link is named."""
    spec, order = me.spec, me.order
    rounds: list[list[tuple[str, str]]] = []
    if spec.pingpong == "ring":
        rounds = pairmod.ring_rounds(order)
    elif spec.pingpong == "all":
        rounds = pairmod.all_pair_rounds(order)
    elif spec.isolate and (not group_ok or below):
        rounds = pairmod.ring_rounds(order)
    store = me.dist.distributed_c10d._get_default_store()
    results: list[dict[str, Any]] = []
    groups: dict[str, Any] = {}

    def run_round(idx: int, rnd: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return _pair_round(me.torch, me.dist, store, idx, rnd, me.leader, me.node, me.rank, spec, me.device,
                           me.sync, groups)

    idx = 0
    for rnd in rounds:
        results += run_round(idx, rnd)
        idx += 1
    extra = 0
    while spec.isolate and extra < spec.max_isolation_rounds:
        nxt = pairmod.next_round(order, results, spec.pair_min_gbps, spec.pair_slow_ratio)
        if not nxt:
            break
        emit("isolation_round", rank=me.rank, round=idx, pairs=[list(p) for p in nxt])
        results += run_round(idx, nxt)
        idx += 1
        extra += 1


def _measure_allreduce(torch: Any, dist: Any, size: int, dtype: Any, device: Any, spec: SweepSpec,
                       rank: int, world: int, sync: Any) -> dict[str, Any]:
    elem = torch.tensor([], dtype=dtype).element_size()
    count = max(1, size // elem)
    buf = torch.zeros(count, dtype=dtype, device=device)
    for _ in range(spec.warmup):
        dist.all_reduce(buf)
    sync()
    times = []
    for _ in range(spec.iters):
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        sync()
        times.append(time.perf_counter() - t0)
    # The slowest rank counts: each rank summarises its own iterations (median, p99, mean,
    # min), then the MAX over ranks is taken. A MAX per iteration would add every rank's
    # jitter on top (ranks end the same collective at slightly different moments); the
    # per-rank mean is the nccl-tests figure (loop time / iterations).
    mine = sorted(times)
    n = len(mine)
    own_med = mine[n // 2] if n % 2 else (mine[n // 2 - 1] + mine[n // 2]) / 2
    own_p99 = mine[min(n - 1, max(0, int(round(0.99 * n + 0.5)) - 1))]
    summary = torch.tensor([own_med, own_p99, sum(mine) / n, mine[0]], dtype=torch.float64, device=device)
    dist.all_reduce(summary, op=dist.ReduceOp.MAX)
    med, p99, mean, fastest = (float(x) for x in summary.cpu().tolist())
    # correctness: a pattern that differs per element and per rank, checked on every rank
    pat = (torch.arange(count, device=device, dtype=torch.int64) % 7) + 1
    chk = (pat * (rank + 1)).to(dtype)
    dist.all_reduce(chk)
    want = (pat * (world * (world + 1) // 2)).to(dtype)
    if dtype.is_floating_point:
        tol = 1e-2 if elem <= 2 else 1e-6
        bad = int(((chk.double() - want.double()).abs() > tol * want.double().abs()).sum().item())
    else:
        bad = int((chk != want).sum().item())
    wrong = torch.tensor([bad], dtype=torch.int64, device=device)
    dist.all_reduce(wrong)
    # time and bandwidth from the mean, as nccl-tests reports them (average time per op, bytes
    # / that time): time_us is the figure algbw and busbw follow from; the median and p99 are extra
    nbytes = count * elem  # the bytes reduced (a size that is no multiple of the element is rounded down)
    algbw = nbytes / mean / 1e9 if mean > 0 else 0.0
    return {"bytes": nbytes, "count": count, "dtype": str(dtype).replace("torch.", ""),
            "iters": spec.iters, "time_us": mean * 1e6, "median_us": med * 1e6, "p99_us": p99 * 1e6,
            "min_us": fastest * 1e6, "algbw": algbw, "busbw": algbw * busbw_factor(world),
            "wrong": int(wrong.item()), "world": world}


def _bare_loop(torch: Any, dist: Any, size: int, dtype: Any, device: Any, spec: SweepSpec, sync: Any) -> float:
    """Calibration: a plain timed loop of all_reduce (no per-iteration timing); the slowest
    rank's seconds per iteration."""
    buf = torch.zeros(max(1, size // torch.tensor([], dtype=dtype).element_size()), dtype=dtype, device=device)
    dist.all_reduce(buf)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(spec.iters):
        dist.all_reduce(buf)
    sync()
    took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return float(took.item()) / spec.iters


def _pair_round(torch: Any, dist: Any, store: Any, idx: int, rnd: list[tuple[str, str]], leader: dict[str, int],
                node: str, rank: int, spec: SweepSpec, device: Any, sync: Any,
                groups: dict[str, Any]) -> list[dict[str, Any]]:
    from datetime import timedelta

    timeout = timedelta(seconds=spec.op_timeout_s)
    mine = next((p for p in rnd if node in p), None)
    if mine is None or pairmod.key(*mine) in groups:
        _spare_group(dist, rank, timeout)
    if mine is not None:
        a, b = mine
        ra, rb = leader[a], leader[b]
        first = node == a
        peer = rb if first else ra
        res: dict[str, Any] = {"a": a, "b": b, "round": idx, "rank_a": ra, "rank_b": rb, "status": "ok",
                               "bytes": spec.pp_large_bytes}
        _state.update(phase=f"pingpong {a}<->{b}", bytes=None)
        try:
            k = pairmod.key(a, b)
            if k not in groups:  # a retest reuses the pair's group (group names come from the ranks)
                groups[k] = dist.new_group([min(ra, rb), max(ra, rb)], timeout=timeout, use_local_synchronization=True)
            g = groups[k]
            lat, _ = _pingpong(torch, dist, g, first, peer, spec.pp_small_bytes, spec.pp_iters, device, sync, res)
            res["lat_us"] = lat * 1e6
            if spec.pp_mid_bytes:
                # one jumbo-sized message: a path that drops jumbo frames stalls here even
                # where segmentation offload still carries the large transfers
                mid, _ = _pingpong(torch, dist, g, first, peer, spec.pp_mid_bytes, spec.pp_iters, device, sync, res)
                res["mid_us"] = mid * 1e6
            med, best = _pingpong(torch, dist, g, first, peer, spec.pp_large_bytes, spec.pp_iters, device, sync, res)
            # bandwidth from the fastest round trip: noise (a busy CPU, a context switch) only adds
            # time, a slow link cannot go faster than it is
            res["time_us"] = best * 1e6
            res["median_us"] = med * 1e6
            res["bw_gbps"] = spec.pp_large_bytes / best / 1e9 if best > 0 else 0.0
        except Exception as exc:
            res["status"] = "stalled" if "imeout" in str(exc) or "imed out" in str(exc) else "error"
            res["error"] = _short(exc)
        if first:
            store.set(f"pf/pp/{idx}/{pairmod.key(a, b)}", _json(res))
            emit("pair", rank=rank, **res)
    # every node leader learns the round's results (small store messages)
    out = []
    for a, b in rnd:
        k = f"pf/pp/{idx}/{pairmod.key(a, b)}"
        try:
            store.wait([k], timedelta(seconds=spec.op_timeout_s * 3 + 10))
            out.append(json.loads(store.get(k).decode()))
        except Exception as exc:
            out.append({"a": a, "b": b, "round": idx, "status": "missing", "error": _short(exc)})
    return out


def _spare_group(dist: Any, rank: int, timeout: Any) -> None:
    """torch numbers the groups each process creates, and two ranks meet in a new group only
    when their counts agree: every node leader creates exactly one group per round, a group
    of itself when it sits the round out (odd rings) or reuses its pair's group (retests)."""
    try:
        dist.new_group([rank], timeout=timeout, use_local_synchronization=True)
    except Exception as exc:  # reported with the round's results, never raised into the round
        emit("log", rank=rank, line=f"spare group: {_short(exc)}")


def _json(d: dict[str, Any]) -> str:
    return json.dumps(d, default=str)


def _pingpong(torch: Any, dist: Any, g: Any, first: bool, peer: int, nbytes: int, iters: int, device: Any,
              sync: Any, res: dict[str, Any]) -> tuple[float, float]:
    """(median, fastest) half round trip of `nbytes` between this rank and `peer`, seconds."""
    res["stalled_bytes"] = nbytes
    _state["bytes"] = nbytes
    n = max(1, nbytes)
    t = (torch.arange(n, dtype=torch.int64, device=device) % 251).to(torch.uint8)
    ref = t.clone()
    times = []
    for i in range(iters + 1):  # one warm-up round trip
        sync()
        t0 = time.perf_counter()
        if first:
            dist.send(t, peer, group=g)
            dist.recv(t, peer, group=g)
        else:
            dist.recv(t, peer, group=g)
            dist.send(t, peer, group=g)
        sync()
        if i:
            times.append((time.perf_counter() - t0) / 2)
    if first and not torch.equal(t, ref):
        raise RuntimeError(f"ping-pong of {nbytes} B came back altered")
    res.pop("stalled_bytes", None)
    times.sort()
    return times[len(times) // 2], times[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m preflight.sweep.worker")
    sub = ap.add_subparsers(dest="mode", required=True)
    ag = sub.add_parser("agent")
    ag.add_argument("--spec", required=True)
    ag.add_argument("--node", required=True)
    ag.add_argument("--node-rank", type=int, required=True)
    ag.add_argument("--nproc", type=int, default=1)
    ag.add_argument("--world", type=int, required=True)
    ag.add_argument("--master-addr", required=True)
    ag.add_argument("--master-port", type=int, required=True)
    ag.add_argument("--watch-stdin", action="store_true")
    rk = sub.add_parser("rank")
    rk.add_argument("--spec", required=True)
    sub.add_parser("torchrun", help="answer like an agent, then exec torchrun with the arguments after --")
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["torchrun"]:  # everything after it belongs to torchrun
        rest = raw[1:]
        return torchrun_main(rest[1:] if rest[:1] == ["--"] else rest)
    args = ap.parse_args(raw)
    if args.mode == "agent":
        rc = agent_main(args)
        sys.stdout.flush()
        os._exit(rc)  # its stdin watcher and forwarders are daemon threads: no interpreter shutdown with them
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())

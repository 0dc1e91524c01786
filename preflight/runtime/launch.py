"""A launcher that keeps the survivors alive: `python -m preflight.runtime.launch`.

    python -m preflight.runtime.launch --nproc 4 [--spares 1] [--max-restarts 2] train.py args...
    # one launcher per node (srun --ntasks-per-node=1, or ssh to each node):
    python -m preflight.runtime.launch --nnodes 2 --node-rank K --master-addr node0 --master-port 29500 \
        --nproc 8 [--spares 1] train.py args...

Starts `--nproc` workers (and `--spares` warm spares) of one node, each with the environment
torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT) plus PREFLIGHT_SLOT, PREFLIGHT_SPARE, PREFLIGHT_NPROC, PREFLIGHT_SPARES,
PREFLIGHT_ATTEMPT and PREFLIGHT_INPROCESS=1 for `InProcessRestart` (preflight.runtime.inprocess).
Unlike torchrun's agent, a worker that dies does not end the others: the launcher records its
exit code in the job's store (so the survivors everywhere agree on it at once) and lets them
re-form. The store outlives every worker.

Across nodes. One launcher runs on each of `--nnodes` nodes. The launcher of node rank 0 hosts
the store on `--master-port`; the others connect to it at `--master-addr` (within
`--node-timeout`). Under `srun` (one task per node) the node count, the node rank and the address
(the step's first node) come from SLURM_STEP_NUM_NODES, SLURM_NODEID and SLURM_STEP_NODELIST, and
the port from MASTER_PORT when set (else 29500); the options win. Launch slots are global: the
workers of node K are RANK K*nproc .. K*nproc+nproc-1 of a world of nnodes*nproc, and the spares
follow the workers (node K's spares are slots nnodes*nproc + K*spares ..). A spare anywhere can
take a failed rank's number; without one the world shrinks. Each launcher watches only its own
children, records their exits in the store and fences (SIGKILL after checking the pid and its
start time) only the processes of its own node that a plan named failed, for a node where no
survivor is left to do it. Every launcher adds to its heartbeat key in the store; a launcher
silent for `--node-timeout` seconds is taken for a lost node.

The attempt ends when every worker of every node has exited (or its node is lost); waiting
spares are released (a `done` key, then SIGKILL after a grace) once no member of the last
generation is left. The verdict is taken over the members of the last generation (the workers
that were training at the end, spares called in included), by node 0's launcher from the exit
codes in the store, and every launcher exits with it: 0 when all of them exited 0; when one
exited 75 (RestartFallback, a hang), the workers of every node are started again from scratch,
up to `--max-restarts` times (the job resumes from its checkpoint), and 75 once they are spent;
otherwise the first failing member's code (128 + N for a signal; 1 for a member of a lost
node). Once the last generation's plan decided the fallback, a member that crashed on its way
out (SIGABRT from a destructor of the broken group) counts as the fallback too. Node 0's launcher writes the decision, the others follow it; node 0 waits at most
`--node-timeout` for the others to read it before its store goes. A launcher that loses node 0
(its heartbeat stops or the store is gone) ends with its own members' verdict, without restart.
SIGTERM, SIGINT and SIGUSR1 are forwarded to every worker of the node (preemption); after a
forwarded SIGTERM or SIGINT on any node no restart is made.

Exit codes of the launcher itself: 2 for bad arguments or a launch that cannot start (a clear
message, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from preflight.runtime import inprocess as ip

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
SPARE_GRACE_S = 5.0
POLL_S = 0.05
BEAT_S = 0.5  # a launcher's heartbeat period (and how often it looks at the others')
NODE_TIMEOUT_S = 60.0
DEFAULT_PORT = 29500  # the port of a multi-node store when none is given (torchrun's)
LAUNCH_NS = "preflight-launch"


class LaunchError(Exception):
    """A launch that cannot start: the message is for the user."""


def _whole(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `lo` to `hi`."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if n < lo or n > hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}: {n}")
        return n
    return parse


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1.0 <= s <= 86400.0:
        raise argparse.ArgumentTypeError(f"must be between 1 and 86400 seconds: {text}")
    return s


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m preflight.runtime.launch",
                                description="Start the workers of one node; survivors of a fault are kept "
                                            "alive for an in-process restart. One launcher per node.")
    p.add_argument("--nproc", "--nproc-per-node", dest="nproc", type=_whole(1, 1024), required=True,
                   help="number of training ranks of this node")
    p.add_argument("--spares", type=_whole(0, 1000), default=0,
                   help="warm spare processes of this node (default 0)")
    p.add_argument("--max-restarts", type=_whole(0, 1000), default=0,
                   help="restarts of the whole set when the workers take the fallback (exit 75)")
    p.add_argument("--nnodes", type=_whole(1, 100000), default=None,
                   help="number of nodes, one launcher on each (default 1; under srun the step's nodes)")
    p.add_argument("--node-rank", type=_whole(0, 99999), default=None,
                   help="this node's number, 0 hosts the store (under srun: SLURM_NODEID)")
    p.add_argument("--master-addr", default=None,
                   help="address of node 0's store (one node: 127.0.0.1; under srun: the step's first node)")
    p.add_argument("--master-port", type=_whole(0, 65535), default=None,
                   help=f"store port (one node: 0, a free one; several: MASTER_PORT, else {DEFAULT_PORT})")
    p.add_argument("--node-timeout", type=_seconds, default=NODE_TIMEOUT_S,
                   help=f"seconds a launcher may be silent before its node counts as lost, and to reach the "
                        f"store (default {NODE_TIMEOUT_S:g})")
    p.add_argument("script", nargs="?", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    ns = p.parse_args(list(argv))
    if not ns.script:
        p.error("no training script given (python -m preflight.runtime.launch --nproc N script.py [args])")
    if not Path(ns.script).is_file():
        p.error(f"training script not found: {ns.script}")
    try:
        resolve_nodes(ns, os.environ if env is None else env)
    except LaunchError as exc:
        p.error(str(exc))
    return ns


def _slurm_step(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The node count, node rank and first node of the srun step this runs in, or None outside
    one (an sbatch script is not a step: its SLURM_NODEID would not tell launchers apart)."""
    if "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env:
        return None
    nodes, node_id = env.get("SLURM_STEP_NUM_NODES", ""), env.get("SLURM_NODEID", "")
    if not nodes.isdigit() or not node_id.isdigit():
        return None
    tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if tasks.isdigit() and int(tasks) != int(nodes):
        raise LaunchError(f"the srun step has {tasks} tasks on {nodes} nodes: start one launcher per node "
                          "(srun --ntasks-per-node=1)")
    first = None
    hostlist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    if hostlist:
        from preflight.inventory import HostlistError, expand

        try:
            first = expand(hostlist)[0]
        except HostlistError as exc:
            raise LaunchError(f"cannot read the step's node list {hostlist!r}: {exc}") from None
    return {"nnodes": int(nodes), "node_rank": int(node_id), "first": first}


def resolve_nodes(ns: argparse.Namespace, env: Mapping[str, str]) -> None:
    """Fill nnodes, node_rank, master_addr and master_port from the options, then srun's step,
    then the defaults; LaunchError for a combination that cannot work."""
    step = _slurm_step(env) if ns.nnodes is None or ns.node_rank is None or ns.master_addr is None else None
    if ns.nnodes is None:
        ns.nnodes = step["nnodes"] if step else 1
    if ns.nnodes == 1:
        ns.node_rank = 0 if ns.node_rank is None else ns.node_rank
        ns.master_addr = ns.master_addr or "127.0.0.1"
        ns.master_port = 0 if ns.master_port is None else ns.master_port
    else:
        if ns.node_rank is None:
            if not step:
                raise LaunchError(f"--nnodes {ns.nnodes} needs --node-rank (this node's number, 0 to "
                                  f"{ns.nnodes - 1}), or a launch by srun")
            ns.node_rank = step["node_rank"]
        if ns.master_addr is None:
            ns.master_addr = env.get("MASTER_ADDR") or (step or {}).get("first")
            if not ns.master_addr:
                raise LaunchError(f"--nnodes {ns.nnodes} needs --master-addr (the address of node rank 0, "
                                  "which hosts the store)")
        if ns.master_port is None:
            port = env.get("MASTER_PORT", "")
            ns.master_port = int(port) if port.isdigit() and 0 < int(port) < 65536 else DEFAULT_PORT
        if ns.master_port == 0:
            raise LaunchError("--master-port 0 (a free port) works for one node only: the other nodes "
                              "need to know the port")
    if ns.node_rank >= ns.nnodes:
        raise LaunchError(f"--node-rank {ns.node_rank} is not below --nnodes {ns.nnodes}")


def launch_key(*parts: object) -> str:
    """A key of the launchers' own records in the job's store."""
    return "/".join([LAUNCH_NS, *map(str, parts)])


def member_key(ns: str, slot: int) -> str:
    """Where a worker registers its host, pid and start time (InProcessRestart._register)."""
    return f"{ns}/member/{slot}"


class Launcher:
    """Starts, watches and restarts one node's workers; see the module docstring."""

    def __init__(self, script: str, args: Sequence[str], nproc: int, spares: int = 0, max_restarts: int = 0,
                 master_addr: str = "127.0.0.1", master_port: int = 0, nnodes: int = 1, node_rank: int = 0,
                 node_timeout_s: float = NODE_TIMEOUT_S) -> None:
        import torch.distributed as dist

        self.script, self.args = script, list(args)
        self.nproc, self.spares, self.max_restarts = nproc, spares, max_restarts
        self.nnodes, self.node_rank, self.node_timeout_s = nnodes, node_rank, float(node_timeout_s)
        self.world = nnodes * nproc
        self.master_addr = master_addr
        hosting = node_rank == 0
        try:
            self.store = dist.TCPStore(master_addr, master_port, is_master=hosting, wait_for_workers=False,
                                       timeout=timedelta(seconds=30 if hosting else self.node_timeout_s))
        except Exception as exc:  # noqa: BLE001 - a port in use, an address not ours, no node 0
            what = "host the store on" if hosting else "reach node 0's store at"
            raise LaunchError(f"cannot {what} {master_addr}:{master_port}: {' '.join(str(exc).split())[:300]}") \
                from exc
        self.port = int(self.store.port)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.exits: dict[int, int] = {}
        self.stopping = False
        self.attempt = 0
        self._beats = 0
        self._beat_at = 0.0
        self._seen: dict[int, tuple[int, float]] = {}  # node rank -> (its beat count, when it last changed)
        self._fenced_gen = 0
        self._members_seen: list[int] = []
        self._plan_seen: dict[str, Any] = {}  # the last generation's plan read from the store
        self._looked_at = 0.0
        self._join()

    # ----- the launchers of the job ----------------------------------------------------------
    def _join(self) -> None:
        """Claim this node rank and check that every launcher runs the same layout."""
        if self.nnodes == 1:
            return
        layout = {"nnodes": self.nnodes, "nproc": self.nproc, "spares": self.spares,
                  "max_restarts": self.max_restarts}
        try:
            if self.node_rank == 0:
                self.store.set(launch_key("layout"), json.dumps(layout))
            else:
                self.store.wait([launch_key("layout")], timedelta(seconds=self.node_timeout_s))
                theirs = json.loads(self.store.get(launch_key("layout")))
                if theirs != layout:
                    diff = ", ".join(f"{k} {layout[k]} here, {theirs.get(k)} on node 0" for k in layout
                                     if theirs.get(k) != layout[k])
                    raise LaunchError(f"the launchers disagree: {diff}")
            if self.store.add(launch_key("claim", self.node_rank), 1) != 1:
                raise LaunchError(f"node rank {self.node_rank} is already taken by another launcher of this job")
        except LaunchError:
            raise
        except Exception as exc:  # noqa: BLE001 - node 0 went away, or never said its layout
            raise LaunchError(f"no agreement with node 0's launcher: {' '.join(str(exc).split())[:300]}") from exc
        self._beat(force=True)

    def _beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.nnodes == 1 or (not force and now - self._beat_at < BEAT_S):
            return
        self._beat_at = now
        try:
            self.store.add(launch_key("beat", self.node_rank), 1)
        except Exception:  # noqa: BLE001 - the store went with node 0: seen where it matters
            pass

    def lost_nodes(self, nodes: Iterable[int] | None = None) -> set[int]:
        """Of `nodes` (default all), those whose launcher has been silent for node_timeout_s
        (never heard of counts from the first look). Node 0's store gone: every other node is
        lost to this one."""
        now = time.monotonic()
        out = set()
        for k in sorted(set(range(self.nnodes) if nodes is None else nodes)):
            if k == self.node_rank:
                continue
            try:
                count = int(self.store.add(launch_key("beat", k), 0))
            except Exception:  # noqa: BLE001
                return set(range(self.nnodes)) - {self.node_rank}
            last = self._seen.get(k)
            if last is None or last[0] != count:
                self._seen[k] = (count, now)
            elif now - last[1] > self.node_timeout_s:
                out.add(k)
        return out

    def node_of(self, slot: int) -> int:
        """The node rank a launch slot runs on."""
        if slot < self.world:
            return slot // self.nproc
        return (slot - self.world) // max(1, self.spares)

    def local_slots(self) -> list[int]:
        workers = range(self.node_rank * self.nproc, (self.node_rank + 1) * self.nproc)
        first_spare = self.world + self.node_rank * self.spares
        return [*workers, *range(first_spare, first_spare + self.spares)]

    # ----- this node's workers -------------------------------------------------------------------
    def _env(self, slot: int) -> dict[str, str]:
        spare = slot >= self.world
        local = (self.nproc + slot - self.world - self.node_rank * self.spares) if spare else slot % self.nproc
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
        env.update({"RANK": str(slot), "LOCAL_RANK": str(local), "WORLD_SIZE": str(self.world),
                    "LOCAL_WORLD_SIZE": str(self.nproc), "GROUP_RANK": str(self.node_rank),
                    "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.port), ip.ENV_INPROCESS: "1",
                    ip.ENV_SLOT: str(slot), ip.ENV_SPARE: "1" if spare else "0", ip.ENV_NPROC: str(self.world),
                    ip.ENV_SPARES: str(self.nnodes * self.spares), ip.ENV_ATTEMPT: str(self.attempt)})
        return env

    def _spawn(self) -> None:
        self.procs, self.exits = {}, {}
        self._fenced_gen = 0
        for slot in self.local_slots():
            self.procs[slot] = subprocess.Popen([sys.executable, self.script, *self.args], env=self._env(slot))

    def _forward(self, signum: int, _frame: Any) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stopping = True
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signum)
                except OSError:
                    pass

    def _members(self, ns: str) -> list[int]:
        """The slots of the last generation (the first when no plan was written)."""
        try:
            if self.store.check([ip.latest_key(ns)]):
                gen = int(self.store.get(ip.latest_key(ns)))
                plan = json.loads(self.store.get(ip.plan_key(ns, gen)))
                self._members_seen = [int(s) for s in plan["members"]]
                self._plan_seen = plan
                return list(self._members_seen)
        except Exception:  # noqa: BLE001 - an unreadable plan: the last one seen decides
            if self._members_seen:
                return list(self._members_seen)
        return list(range(self.world))

    def _verdict(self, exits: Mapping[int, int], members: list[int]) -> int:
        """The attempt's verdict (`verdict`), except that once the last generation's plan decided
        the fallback, a member that crashed on its way out (a destructor's abort in the broken
        group's teardown: SIGABRT, 134) still counts as the fallback the group agreed on."""
        rc = verdict(exits, members, self._plan_seen)
        if rc == verdict(exits, members):
            return rc
        plan = self._plan_seen
        odd = "; ".join(f"slot {s} {ip.exit_words(exits.get(s, 1))}" for s in members
                        if exits.get(s, 1) not in (0, ip.EXIT_FALLBACK))
        say_launch(f"generation {plan.get('gen')} decided the fallback ({plan.get('reason') or 'no reason given'}), "
                   f"then {odd} on its way out: counted as the fallback (exit {ip.EXIT_FALLBACK})")
        return ip.EXIT_FALLBACK

    def _reap(self, ns: str) -> None:
        for slot, p in self.procs.items():
            if slot in self.exits:
                continue
            rc = p.poll()
            if rc is None:
                continue
            self.exits[slot] = rc
            try:
                self.store.set(ip.exit_key(ns, slot), str(rc))
            except Exception:  # noqa: BLE001
                pass

    def _fence_failed(self, ns: str) -> None:
        """Fence this node's children that a new plan names failed and that still run (no
        survivor of this node may be left to do it): the registered pid must be our child's and
        its start time the registered one (ip.fence checks the host and the start time)."""
        try:
            if not self.store.check([ip.latest_key(ns)]):
                return
            gen = int(self.store.get(ip.latest_key(ns)))
            if gen <= self._fenced_gen:
                return
            plan = json.loads(self.store.get(ip.plan_key(ns, gen)))
            self._fenced_gen = gen
            for f in plan.get("failed") or []:
                slot = int(f["slot"])
                p = self.procs.get(slot)
                if p is None or p.poll() is not None or not self.store.check([member_key(ns, slot)]):
                    continue
                info = json.loads(self.store.get(member_key(ns, slot)))
                if isinstance(info, dict) and info.get("pid") == p.pid and ip.fence(info):
                    print(f"preflight.launch: node {self.node_rank} fenced slot {slot} (pid {p.pid}): "
                          f"{f.get('cause')}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - a plan being written, the store gone: the next look
            pass

    def _member_exits(self, ns: str, members: Sequence[int], lost: set[int]) -> dict[int, int]:
        """The exit codes of the members: this node's own, the others' from the store; a member
        of a lost node counts as 1, one not heard of is left out."""
        out: dict[int, int] = {}
        for s in members:
            if s in self.exits:
                out[s] = self.exits[s]
                continue
            try:
                if self.store.check([ip.exit_key(ns, s)]):
                    raw = self.store.get(ip.exit_key(ns, s)).decode(errors="replace").strip()
                    out[s] = int(raw) if raw.lstrip("-").isdigit() else 1
                    continue
            except Exception:  # noqa: BLE001 - the store went with node 0
                pass
            if self.node_of(s) in lost:
                out[s] = 1
        return out

    def _remote_ended(self, ns: str, slots: list[int]) -> bool:
        """Whether every one of these members of other nodes has exited or its node is lost
        (looked at as often as the heartbeat)."""
        now = time.monotonic()
        if now - self._looked_at < BEAT_S:
            return False
        self._looked_at = now
        try:
            if self.store.check([ip.exit_key(ns, s) for s in slots]):
                return True
            lost = self.lost_nodes({self.node_of(s) for s in slots})
            rest = [s for s in slots if self.node_of(s) not in lost]
            return not rest or bool(self.store.check([ip.exit_key(ns, s) for s in rest]))
        except Exception:  # noqa: BLE001 - the store went with node 0: no member there is left to wait for
            return True

    def _release_spares(self, ns: str, members: list[int], since: list[float | None]) -> None:
        """No member left (on any node): the waiting spares are told the job is done, then ended."""
        if since[0] is None:
            if any(s in self.procs and s not in self.exits for s in members):
                return
            remote = [s for s in members if s not in self.procs]
            if remote and not self._remote_ended(ns, remote):
                return
            since[0] = time.monotonic()
            try:
                self.store.set(ip.done_key(ns), "1")
            except Exception:  # noqa: BLE001
                pass
        elif time.monotonic() - since[0] > SPARE_GRACE_S:
            for slot, p in self.procs.items():
                if slot not in self.exits and p.poll() is None:
                    p.kill()

    # ----- one attempt -----------------------------------------------------------------------------
    def run_attempt(self) -> tuple[int, bool]:
        """One set of workers on every node, from start to the last exit: the attempt's verdict
        and whether to start the workers again."""
        ns = ip.namespace(self.attempt)
        self._spawn()
        since: list[float | None] = [None]
        while len(self.exits) < len(self.procs):
            time.sleep(POLL_S)
            self._reap(ns)
            self._fence_failed(ns)
            self._release_spares(ns, self._members(ns), since)
            self._beat()
        if self.nnodes == 1:
            rc = self._verdict(self.exits, self._members(ns))
            return rc, rc == ip.EXIT_FALLBACK and not self.stopping and self.attempt < self.max_restarts
        members = self._members(ns)
        try:
            self.store.set(launch_key(self.attempt, "ended", self.node_rank), json.dumps({"stopping": self.stopping}))
        except Exception:  # noqa: BLE001 - node 0 is gone: decided below
            pass
        if self.node_rank == 0:
            return self._decide(ns)
        return self._follow(members)

    def _decide(self, ns: str) -> tuple[int, bool]:
        """Node 0: wait until every other launcher's workers ended (or its node is lost), take
        the verdict over the last generation's members from the store, write the decision."""
        pending = set(range(1, self.nnodes))
        lost: set[int] = set()
        stopping = self.stopping
        while pending:
            self._beat()
            for k in sorted(pending):
                key = launch_key(self.attempt, "ended", k)
                if self.store.check([key]):
                    pending.discard(k)
                    stopping = stopping or bool(json.loads(self.store.get(key)).get("stopping"))
            newly = self.lost_nodes(pending) if pending else set()
            for k in sorted(newly):
                say_launch(f"node {k} is lost (its launcher silent for {self.node_timeout_s:g} s); "
                           "its members count as failed")
            lost |= newly
            pending -= newly
            if pending:
                time.sleep(2 * POLL_S)
        members = self._members(ns)
        rc = self._verdict(self._member_exits(ns, members, lost), members)
        restart = rc == ip.EXIT_FALLBACK and not stopping and self.attempt < self.max_restarts
        self.store.set(launch_key(self.attempt, "decision"),
                       json.dumps({"rc": rc, "restart": restart, "lost": sorted(lost)}))
        if not restart:
            self._wait_acks(len(set(range(1, self.nnodes)) - lost))
        return rc, restart

    def _wait_acks(self, expected: int) -> None:
        """Keep the store up until the other launchers have read the decision, at most node_timeout_s."""
        deadline = time.monotonic() + self.node_timeout_s
        while time.monotonic() < deadline:
            try:
                if int(self.store.add(launch_key(self.attempt, "ack"), 0)) >= expected:
                    return
            except Exception:  # noqa: BLE001
                return
            time.sleep(POLL_S)

    def _follow(self, members: list[int]) -> tuple[int, bool]:
        """Another node: wait for node 0's decision while node 0 lives; without it, this node's
        members decide and nothing is restarted."""
        key = launch_key(self.attempt, "decision")
        while True:
            self._beat()
            try:
                if self.store.check([key]):
                    decision = json.loads(self.store.get(key))
                    self.store.add(launch_key(self.attempt, "ack"), 1)
                    return int(decision["rc"]), bool(decision["restart"])
                gone = 0 in self.lost_nodes([0])
            except Exception:  # noqa: BLE001 - the store went with node 0
                gone = True
            if gone:
                mine = [s for s in members if s in self.procs] or self.local_slots()[:self.nproc]
                rc = self._verdict(self.exits, mine)
                say_launch(f"node 0's launcher is gone before its verdict: this node's members say {rc}; "
                           "no restart")
                return rc, False
            time.sleep(2 * POLL_S)

    def run(self) -> int:
        for sig in FORWARDED:
            signal.signal(sig, self._forward)
        while True:
            rc, restart = self.run_attempt()
            if not restart:
                return rc
            self.attempt += 1
            where = f" on {self.nnodes} nodes" if self.nnodes > 1 else ""
            say_launch(f"workers took the fallback (exit {rc}); restart {self.attempt} of {self.max_restarts}{where}")


def say_launch(text: str) -> None:
    print(f"preflight.launch: {text}", file=sys.stderr, flush=True)


def verdict(exits: Mapping[int, int], members: Sequence[int], plan: Mapping[str, Any] | None = None) -> int:
    """0 when every member exited 0; 75 when one took the fallback, or when `plan` (the last
    generation's) decided it; else the first member's failing code (a signal N reads 128 + N)."""
    codes = [exits.get(s, 1) for s in members]
    if all(c == 0 for c in codes):
        return 0
    if ip.EXIT_FALLBACK in codes or (plan or {}).get("decision") == "fallback":
        return ip.EXIT_FALLBACK
    bad = next(c for c in codes if c != 0)
    return 128 - bad if bad < 0 else bad


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        launcher = Launcher(ns.script, ns.args, ns.nproc, ns.spares, ns.max_restarts, ns.master_addr,
                            ns.master_port, ns.nnodes, ns.node_rank, ns.node_timeout)
    except LaunchError as exc:
        say_launch(str(exc))
        return 2
    return launcher.run()


if __name__ == "__main__":
    sys.exit(main())

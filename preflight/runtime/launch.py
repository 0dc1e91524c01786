"""A launcher that keeps the survivors alive: `python -m preflight.runtime.launch`.

    python -m preflight.runtime.launch --nproc 4 [--spares 1] [--max-restarts 2] train.py args...

Starts `--nproc` workers (and `--spares` warm spares) of one node, each with the environment
torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus PREFLIGHT_SLOT,
PREFLIGHT_SPARE, PREFLIGHT_NPROC, PREFLIGHT_SPARES, PREFLIGHT_ATTEMPT and PREFLIGHT_INPROCESS=1
for `InProcessRestart` (preflight.runtime.inprocess). Unlike torchrun's agent, a worker that
dies does not end the others: the launcher records its exit code in the store it hosts (so the
survivors agree on it at once) and lets them re-form. The store lives in the launcher and
outlives every worker.

The attempt ends when every worker has exited; waiting spares are released (a `done` key, then
SIGKILL after a grace) once no other worker is left. The verdict is taken over the members of
the last generation (the workers that were training at the end, spares called in included):
0 when all of them exited 0; when one exited 75 (RestartFallback, a hang), the whole set is
started again from scratch, up to `--max-restarts` times (the job resumes from its checkpoint),
and 75 once they are spent; otherwise the first failing member's code (128 + N for a signal).
SIGTERM, SIGINT and SIGUSR1 are forwarded to every worker (preemption); after a forwarded
SIGTERM or SIGINT no restart is made.

Exit codes of the launcher itself: 2 for bad arguments (a clear message, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from preflight.runtime import inprocess as ip

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
SPARE_GRACE_S = 5.0
POLL_S = 0.05


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


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m preflight.runtime.launch",
                                description="Start the workers of one node; survivors of a fault are kept "
                                            "alive for an in-process restart.")
    p.add_argument("--nproc", "--nproc-per-node", dest="nproc", type=_whole(1, 1024), required=True,
                   help="number of training ranks")
    p.add_argument("--spares", type=_whole(0, 1000), default=0, help="warm spare processes (default 0)")
    p.add_argument("--max-restarts", type=_whole(0, 1000), default=0,
                   help="restarts of the whole set when the workers take the fallback (exit 75)")
    p.add_argument("--master-addr", default="127.0.0.1", help="address the store listens on")
    p.add_argument("--master-port", type=_whole(0, 65535), default=0, help="store port (0: a free one)")
    p.add_argument("script", nargs="?", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    ns = p.parse_args(list(argv))
    if not ns.script:
        p.error("no training script given (python -m preflight.runtime.launch --nproc N script.py [args])")
    if not Path(ns.script).is_file():
        p.error(f"training script not found: {ns.script}")
    return ns


class Launcher:
    """Starts, watches and restarts one node's workers; see the module docstring."""

    def __init__(self, script: str, args: Sequence[str], nproc: int, spares: int = 0, max_restarts: int = 0,
                 master_addr: str = "127.0.0.1", master_port: int = 0) -> None:
        import torch.distributed as dist

        self.script, self.args = script, list(args)
        self.nproc, self.spares, self.max_restarts = nproc, spares, max_restarts
        self.master_addr = master_addr
        try:
            self.store = dist.TCPStore(master_addr, master_port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=30))
        except Exception as exc:  # noqa: BLE001 - a port in use, an address not ours
            raise LaunchError(f"cannot host the store on {master_addr}:{master_port}: {exc}") from exc
        self.port = int(self.store.port)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.exits: dict[int, int] = {}
        self.stopping = False
        self.attempt = 0

    def _env(self, slot: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
        env.update({"RANK": str(slot), "LOCAL_RANK": str(slot), "WORLD_SIZE": str(self.nproc),
                    "LOCAL_WORLD_SIZE": str(self.nproc), "MASTER_ADDR": self.master_addr,
                    "MASTER_PORT": str(self.port), ip.ENV_INPROCESS: "1", ip.ENV_SLOT: str(slot),
                    ip.ENV_SPARE: "1" if slot >= self.nproc else "0", ip.ENV_NPROC: str(self.nproc),
                    ip.ENV_SPARES: str(self.spares), ip.ENV_ATTEMPT: str(self.attempt)})
        return env

    def _spawn(self) -> None:
        self.procs, self.exits = {}, {}
        for slot in range(self.nproc + self.spares):
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
                return [int(s) for s in plan["members"]]
        except Exception:  # noqa: BLE001 - an unreadable plan: the first generation decides
            pass
        return list(range(self.nproc))

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

    def _release_spares(self, ns: str, members: list[int], since: list[float | None]) -> None:
        """No member left: the waiting spares are told the job is done, then ended."""
        if any(s not in self.exits for s in members):
            return
        if since[0] is None:
            since[0] = time.monotonic()
            try:
                self.store.set(ip.done_key(ns), "1")
            except Exception:  # noqa: BLE001
                pass
        elif time.monotonic() - since[0] > SPARE_GRACE_S:
            for slot, p in self.procs.items():
                if slot not in self.exits and p.poll() is None:
                    p.kill()

    def run_attempt(self) -> int:
        """One set of workers, from start to the last exit; the attempt's verdict."""
        ns = ip.namespace(self.attempt)
        self._spawn()
        since: list[float | None] = [None]
        while len(self.exits) < len(self.procs):
            time.sleep(POLL_S)
            self._reap(ns)
            self._release_spares(ns, self._members(ns), since)
        return verdict(self.exits, self._members(ns))

    def run(self) -> int:
        for sig in FORWARDED:
            signal.signal(sig, self._forward)
        while True:
            rc = self.run_attempt()
            if rc != ip.EXIT_FALLBACK or self.stopping or self.attempt >= self.max_restarts:
                return rc
            self.attempt += 1
            print(f"preflight.launch: workers took the fallback (exit {rc}); restart {self.attempt} of "
                  f"{self.max_restarts}", file=sys.stderr, flush=True)


def verdict(exits: dict[int, int], members: Sequence[int]) -> int:
    """0 when every member exited 0; 75 when one took the fallback; else the first member's
    failing code (a signal N reads 128 + N)."""
    codes = [exits.get(s, 1) for s in members]
    if all(c == 0 for c in codes):
        return 0
    if ip.EXIT_FALLBACK in codes:
        return ip.EXIT_FALLBACK
    bad = next(c for c in codes if c != 0)
    return 128 - bad if bad < 0 else bad


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        launcher = Launcher(ns.script, ns.args, ns.nproc, ns.spares, ns.max_restarts, ns.master_addr,
                            ns.master_port)
    except LaunchError as exc:
        print(f"preflight.launch: {exc}", file=sys.stderr)
        return 2
    return launcher.run()


if __name__ == "__main__":
    sys.exit(main())

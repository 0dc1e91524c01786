"""Fan-out against a real slurmctld: resolving the addresses of 16 Slurm nodes is ONE scontrol
call, counted by a logging `scontrol` placed first on PATH that then runs the real one.

The controller knows 16 nodes whose NodeAddr differs from their NodeName (and one whose
address is its name); no slurmd runs, since `scontrol show node` is answered by slurmctld
alone. It runs on loopback, in its own UTS namespace (slurmctld must find its configured host
name), with ports of its own, so it meets none of the namespace clusters of other tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight import procs, slurm
from preflight.transport.srun import SrunTransport
from tests.conftest import need

pytestmark = pytest.mark.real

NODES = [f"pf{i:02d}" for i in range(1, 17)]
ADDRS = {n: f"10.77.{i // 8}.{100 + i}" for i, n in enumerate(NODES)}
DAEMONS = ("/usr/sbin/slurmctld", "/usr/sbin/munged", "/usr/bin/unshare")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _conf(d: Path, sock: Path) -> str:
    lines = [
        "ClusterName=pfaddr", "SlurmctldHost=pfaddrctl(127.0.0.1)", f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
        "CredType=cred/munge", f"AuthInfo=socket={sock}", f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool'}", f"SlurmctldPidFile={d / 'slurmctld.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none", "MpiDefault=none", "SwitchType=switch/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "ReturnToService=2", "SlurmdTimeout=300", "MessageTimeout=10",
    ]
    lines += [f"NodeName={n} NodeAddr={a} CPUs=1 RealMemory=100 State=UNKNOWN" for n, a in ADDRS.items()]
    lines.append("NodeName=pf99 CPUs=1 RealMemory=100 State=UNKNOWN")  # no NodeAddr: reached by its name
    lines.append(f"PartitionName=main Nodes={','.join([*NODES, 'pf99'])} Default=YES State=UP")
    return "\n".join(lines) + "\n"


def _start(argv: list[str], log: Path, env: dict[str, str], started: list[subprocess.Popen[bytes]]) -> None:
    with open(log, "ab") as fh:
        started.append(procs.spawn(argv, env=env, stdout=fh, stderr=fh))


def _wait(what: str, ready: object, limit: float, log: Path) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if callable(ready) and ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {limit:g} s: {log.read_text()[-1500:] if log.exists() else ''}")


@pytest.fixture()
def controller(tmp_path: Path) -> Iterator[dict[str, str]]:
    """SLURM_CONF of a running slurmctld that knows the nodes of ADDRS (and pf99)."""
    missing = [t for t in (*DAEMONS, "/usr/bin/scontrol") if not os.path.exists(t)]
    need(not missing and os.geteuid() == 0, f"slurmctld test prerequisites: {missing or 'root'}")
    d = tmp_path / "slurm"
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir(parents=True)
    (d / "munge").chmod(0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = d / "munge" / "munge.socket.2"
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, sock))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, "SLURM_CONF": str(conf)}
    started: list[subprocess.Popen[bytes]] = []
    try:
        _start(["/usr/sbin/munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}",
                f"--pid-file={d / 'munge' / 'munged.pid'}", f"--seed-file={d / 'munge' / 'munged.seed'}",
                f"--log-file={d / 'munge' / 'munged.log'}"], d / "munged.out", env, started)
        _wait("munged", sock.exists, 10, d / "munged.out")
        _start(["/usr/bin/unshare", "--uts", "sh", "-c", f"hostname pfaddrctl && exec /usr/sbin/slurmctld -D -i -f {conf}"],
               d / "slurmctld.out", env, started)
        _wait("slurmctld", lambda: "UP" in procs.run_bounded(["/usr/bin/scontrol", "ping"], 10, env=env)[1], 60,
              d / "slurmctld.log")
        yield env
    finally:
        for p in reversed(started):
            procs.stop_group(p, grace_s=5.0)


def _counting_scontrol(bindir: Path) -> Path:
    """`scontrol` that appends its argv (JSON) to a log, then runs the real scontrol."""
    bindir.mkdir()
    log = bindir / "calls.log"
    log.write_text("")
    real = shutil.which("scontrol") or "/usr/bin/scontrol"
    wrapper = bindir / "scontrol"
    wrapper.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {log}\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    return log


def test_sixteen_node_addresses_are_one_scontrol_call(controller: dict[str, str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log = _counting_scontrol(tmp_path / "bin")
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_CONF", controller["SLURM_CONF"])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    got = slurm.node_addresses(NODES)
    assert got == ADDRS
    calls = log.read_text().splitlines()
    assert calls == ["show node -o pf[01-16]"], calls

    # a node Slurm does not know keeps its name; the others still resolve, still in one call
    log.write_text("")
    got = slurm.node_addresses([*NODES, "pf99", "ghost7"])
    assert got == {**ADDRS, "pf99": "pf99", "ghost7": "ghost7"}
    assert len(log.read_text().splitlines()) == 1

    # the srun transport (what `preflight cluster` uses for peer addresses) goes through the same call
    log.write_text("")
    t = SrunTransport()
    assert t.resolve_addresses(NODES) == ADDRS and t.resolve_hostname("pf16") == ADDRS["pf16"]
    assert len(log.read_text().splitlines()) == 1

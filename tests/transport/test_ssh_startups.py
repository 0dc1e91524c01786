"""The SSH transport against sshd's start-up limit (MaxStartups), on a real sshd.

sshd counts a connection as a "start-up" from accept until it has authenticated; past
MaxStartups `start:rate:full` it closes new connections at once, before its banner. A fleet
controller meets it when many host names map onto one server (aliases, a bastion) or when
another client holds unauthenticated connections. Here one namespace node runs a second sshd
on port 2222 whose MaxStartups is tiny, so the limit is met every time:

- many aliases of that one server at once: every node answers (the transport bounds its
  handshakes per server and retries a connection the server dropped during its start-up);
- a connection held unauthenticated by someone else and a limit of one: every attempt is
  dropped, and the node's ERROR names the cause after the retries, not "did not speak SSH".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from preflight.transport.ssh import _closed_by_peer
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites

DRIVE = Path(__file__).with_name("_drive.py")
PREFIX, SUBNET = "pfm", "10.83.0"  # apart from the other cluster tests' namespaces and subnet
PORT = 2222


class LimitedSSHD:
    """A second sshd in a node's namespace, on PORT, with its own MaxStartups (LogLevel
    VERBOSE: it logs every connection it drops, not only the first of a burst)."""

    made = 0

    def __init__(self, cluster: NetCluster, node: str, max_startups: str) -> None:
        self.cluster = cluster
        self.node = cluster.node(node)
        LimitedSSHD.made += 1
        self.dir = cluster.workdir / f"sshd{LimitedSSHD.made}-{max_startups.replace(':', '-')}"
        self.dir.mkdir()
        self.log = self.dir / "sshd.log"
        cfg = self.dir / "sshd_config"
        cfg.write_text(
            f"Port {PORT}\nListenAddress {self.node.addr}\nHostKey {self.node.home / 'ssh_host_ed25519_key'}\n"
            "PidFile none\n"
            f"AuthorizedKeysFile {cluster.workdir / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            f"UsePAM no\nStrictModes no\nPrintMotd no\nMaxStartups {max_startups}\nLoginGraceTime 60\nLogLevel VERBOSE\n"
            f"SetEnv PATH={cluster.node_path(self.node)}\n")
        # as the cluster's own sshd: this machine's ~/.bashrc hidden from the sessions (a version
        # manager's start-up there would cost every session seconds)
        script = (f"hostname {node} && mount -t tmpfs tmpfs /run && mkdir -p /run/sshd && "
                  f"{cluster._plain_bashrc()}exec /usr/sbin/sshd -D -e -f {cfg}")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.node.ns, "unshare", "--uts", "--mount", "--propagation", "private",
                 "sh", "-c", script], stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
        self.known = self.dir / "known_hosts"
        pub = " ".join((self.node.home / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        self.known.write_text(f"[{self.node.addr}]:{PORT} {pub}\n")
        deadline = time.monotonic() + 20
        while "Server listening" not in self.log.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-1000:]
            time.sleep(0.1)

    def config(self, aliases: list[str]) -> Path:
        """An ssh_config where every alias is this server."""
        path = self.dir / "ssh_config"
        path.write_text("".join(f"Host {a}\n  HostName {self.node.addr}\n  Port {PORT}\n  User root\n"
                                f"  IdentityFile {self.cluster.key}\n  UserKnownHostsFile {self.known}\n"
                                "  StrictHostKeyChecking yes\n\n" for a in aliases))
        return path

    def drops(self) -> int:
        return self.log.read_text().count("past MaxStartups")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    missing = prerequisites()
    need(not missing, f"test cluster prerequisites missing: {', '.join(missing)}")
    c = NetCluster(1, tmp_path_factory.mktemp("startups"), prefix=PREFIX, subnet=SUBNET)
    try:
        c.up([])
        yield c
    finally:
        c.down()


@pytest.fixture()
def limited(cluster: NetCluster, request: pytest.FixtureRequest) -> Iterator[LimitedSSHD]:
    sshd = LimitedSSHD(cluster, "n1", request.param)
    try:
        yield sshd
    finally:
        sshd.stop()


def drive(cluster: NetCluster, config: Path, nodes: list[str], limit: float = 120, **opts: Any) -> dict[str, Any]:
    spec = {"config": str(config), "opts": opts, "rounds": 1,
            "bundles": {n: [["hostname", ["hostname"], 10]] for n in nodes}}
    p = cluster.client(sys.executable, str(DRIVE), json.dumps(spec), check=False, timeout=limit)
    assert p.returncode == 0, p.stderr[-3000:]
    outcomes: dict[str, Any] = json.loads(p.stdout)["rounds"][0]["outcomes"]
    outcomes["stderr"] = p.stderr
    return outcomes


def _wrapped(cause: BaseException, message: str) -> Exception:
    """An exception raised while handling `cause`, as paramiko wraps a failed banner read."""
    try:
        try:
            raise cause
        except BaseException:
            raise paramiko.SSHException(message)  # noqa: B904 - paramiko chains it implicitly
    except paramiko.SSHException as exc:
        return exc


def test_a_connection_closed_by_the_server_is_told_from_a_timeout_and_a_stranger() -> None:
    """What counts as "the server closed the connection during its start-up" (worth a new try):
    an end of file or a reset, bare or under paramiko's banner error; a closed transport with
    no error. Not a timeout, and not a server that answered with something other than SSH."""
    assert _closed_by_peer(EOFError())
    assert _closed_by_peer(None)
    assert _closed_by_peer(_wrapped(EOFError(), "Error reading SSH protocol banner"))
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert _closed_by_peer(_wrapped(reset, "Error reading SSH protocol banner[Errno 104] Connection reset by peer"))
    assert not _closed_by_peer(_wrapped(TimeoutError(), "Error reading SSH protocol banner"))
    assert not _closed_by_peer(paramiko.SSHException("Indecipherable protocol version \"HTTP/1.1 400 Bad Request\""))
    assert not _closed_by_peer(paramiko.SSHException("Incompatible ssh peer (no acceptable kex algorithm)"))


ALIASES = [f"alias{i:02d}" for i in range(1, 13)]


@pytest.mark.real
@pytest.mark.parametrize("limited", ["2:100:2"], indirect=True)
def test_many_aliases_of_one_server_past_its_maxstartups_all_answer(cluster: NetCluster,
                                                                    limited: LimitedSSHD) -> None:
    """Twelve host names on one sshd that drops every connection past two unauthenticated
    ones: each name still answers (no ERROR), within the connect budget."""
    out = drive(cluster, limited.config(ALIASES), ALIASES, connect_timeout=10)
    stderr = out.pop("stderr")
    errors = {n: o["error"] for n, o in out.items() if o["error"]}
    assert not errors, (errors, f"sshd dropped {limited.drops()} connections")
    assert "Traceback" not in stderr, stderr[-3000:]  # paramiko's own log of a dropped connection
    for o in out.values():
        assert o["captures"]["hostname"]["stdout"].strip() == "n1", o
    assert limited.drops() >= 1  # the limit was met: eight handshakes at once against two


@pytest.mark.real
@pytest.mark.parametrize("limited", ["2:100:2"], indirect=True)
def test_handshakes_per_server_stay_under_the_servers_limit(cluster: NetCluster, limited: LimitedSSHD) -> None:
    """With the handshakes per server bounded to the server's limit, the names queue for it
    instead of being dropped and retried: all answer, and sshd drops (almost) nothing."""
    out = drive(cluster, limited.config(ALIASES), ALIASES, connect_timeout=10, handshakes_per_server=1)
    out.pop("stderr")
    assert not {n: o["error"] for n, o in out.items() if o["error"]}
    assert limited.drops() <= 1, limited.log.read_text()[-2000:]


@pytest.mark.real
@pytest.mark.parametrize("limited", ["1:100:1"], indirect=True)
def test_a_connection_dropped_at_every_try_is_an_error_naming_maxstartups(cluster: NetCluster,
                                                                         limited: LimitedSSHD) -> None:
    """Someone holds the only start-up slot: every connection is closed before the banner.
    The node is retried for its handshake budget, then its ERROR says what happened and why."""
    holder = subprocess.Popen(
        ["ip", "netns", "exec", cluster.client_ns, "bash", "-c",
         f"exec 3<>/dev/tcp/{limited.node.addr}/{PORT}; sleep 60"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        until = time.monotonic() + 10
        while True:  # the held connection is established (sshd counts it as a start-up)
            ss = cluster.on_node("n1", "ss", "-Htn", "state", "established", f"( sport = :{PORT} )", check=False)
            if ss.stdout.strip():
                break
            assert time.monotonic() < until, "the holding connection never came up"
            time.sleep(0.1)
        begin = time.monotonic()
        out = drive(cluster, limited.config(["held"]), ["held"], connect_timeout=1, deadline=20)
        took = time.monotonic() - begin
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
    o = out["held"]
    assert o["error"], o
    assert "Traceback" not in out["stderr"], out["stderr"][-3000:]
    assert "MaxStartups" in o["error"] and "closed the connection" in o["error"], o["error"]
    assert "did not speak SSH" not in o["error"], o["error"]
    assert o["detail"]["kind"] == "disconnected" and o["detail"]["stage"] in ("banner", "kex"), o["detail"]
    assert int(o["detail"]["tries"]) >= 2, o["detail"]
    assert limited.drops() >= 2
    assert took < 15, took  # within the handshake budget (4 stages of 1 s), not the 20 s deadline


def test_the_handshakes_per_server_come_from_the_command_line() -> None:
    """`run --ssh-handshakes N` reaches the transport; under one is a usage error naming it."""
    from preflight import engine

    t = engine.make_transport("ssh", ["n1"], engine.TransportOptions(ssh_handshakes=3))
    assert getattr(t, "handshakes_per_server", None) == 3
    assert engine.TransportOptions().ssh_handshakes == 8
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "run", "--hosts", "n1", "--ssh-handshakes", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--ssh-handshakes" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr

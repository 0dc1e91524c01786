"""The SSH transport: configuration and host-key logic (pure), and a real 4-node cluster.

The cluster tests build network namespaces with one real sshd per node (tests/netcluster.py)
and run the transport inside the client namespace through tests/transport/_drive.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from preflight.probes import Probe
from preflight.transport.ssh import (
    HostSpec,
    NodeFault,
    SSHTransport,
    _Job,
    _Round,
    parse_jump,
    resolve_host,
)
from tests.conftest import need
from tests.netcluster import NetCluster, prerequisites

DRIVE = Path(__file__).with_name("_drive.py")
PREFIX, SUBNET = "pfs", "10.79.0"  # apart from the other cluster tests' namespaces and subnet


# ---- configuration (no network) ---------------------------------------------------------------


def _config(tmp_path: Path, text: str) -> paramiko.SSHConfig:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return paramiko.SSHConfig.from_path(str(path))


def test_resolve_host_patterns_and_lists(tmp_path: Path) -> None:
    cfg = _config(tmp_path, (
        "Host gpu*\n  User ops\n  Port 2222\n  IdentityFile ~/.ssh/a_key\n  IdentityFile /keys/b_key\n"
        "  UserKnownHostsFile ~/kh1 /etc/kh2\n  StrictHostKeyChecking accept-new\n  ProxyJump bastion\n"
        "Host gpu001\n  HostName 10.0.0.1\n"
        "Host *\n  User nobody\n"
    ))
    spec = resolve_host(cfg, "gpu001")
    assert spec.hostname == "10.0.0.1" and spec.port == 2222 and spec.user == "ops"
    assert [p.name for p in spec.identity_files] == ["a_key", "b_key"] and spec.identities_explicit
    assert spec.known_hosts == (Path("~/kh1").expanduser(), Path("/etc/kh2"))
    assert spec.strict == "accept-new" and spec.proxy_jump == ("bastion",)
    assert spec.host_key_names() == ["[10.0.0.1]:2222"]
    other = resolve_host(cfg, "login", user="me")
    assert other.user == "me" and other.hostname == "login" and other.port == 22
    assert not other.identities_explicit and other.known_hosts[0] == Path("~/.ssh/known_hosts").expanduser()
    assert other.host_key_names() == ["login"]


def test_proxyjump_none_and_chain(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "Host a\n  ProxyJump none\nHost b\n  ProxyJump u@j1:2200,j2\n")
    assert resolve_host(cfg, "a").proxy_jump == ()
    assert resolve_host(cfg, "b").proxy_jump == ("u@j1:2200", "j2")


@pytest.mark.parametrize("hop,expected", [
    ("j1", ("", "j1", None)),
    ("u@j1:2200", ("u", "j1", 2200)),
    ("ssh://u@j1", ("u", "j1", None)),
    ("[fe80::1]:22", ("", "fe80::1", 22)),
])
def test_parse_jump(hop: str, expected: tuple[str, str, int | None]) -> None:
    assert parse_jump(hop) == expected


def test_bad_host_name_is_an_outcome_not_an_exception(tmp_path: Path) -> None:
    (tmp_path / "cfg").write_text("")
    with SSHTransport(ssh_config=tmp_path / "cfg", connect_timeout=1, deadline=5) as transport:
        out = transport.collect({"n1;reboot": [Probe.of("hostname", ["hostname"])]})
    o = out["n1;reboot"]
    assert o.detail == {"kind": "config", "stage": "connect"} and "refusing the host name" in o.error


def test_proxycommand_is_refused_clearly(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "Host n1\n  ProxyCommand nc %h %p\n")
    with pytest.raises(NodeFault, match="use ProxyJump instead") as fault:
        resolve_host(cfg, "n1")
    assert (fault.value.kind, fault.value.stage) == ("config", "connect")


def test_missing_config_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        SSHTransport(ssh_config=tmp_path / "nope")


def test_resolve_addresses_from_the_config_never_raises(tmp_path: Path) -> None:
    """node -> its HostName (the address peers reach it at); a name the config does not know,
    or one that cannot be a host name, maps to itself."""
    cfg = tmp_path / "config"
    cfg.write_text("Host n1\n  HostName 10.0.0.1\nHost gpu*\n  HostName %h.ib.example\n")
    t = SSHTransport(ssh_config=cfg)
    assert t.resolve_addresses(["n1", "gpu7", "ghost", "a;b"]) == {
        "n1": "10.0.0.1", "gpu7": "gpu7.ib.example", "ghost": "ghost", "a;b": "a;b"}
    assert t.resolve_addresses([]) == {}


def test_connect_timeout_comes_from_the_hosts_config_unless_a_flag_gives_one(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "Host slow*\n  ConnectTimeout 30\nHost bad\n  ConnectTimeout soon\n"
                            "Host none\n  ConnectTimeout none\nHost *\n  ConnectTimeout 4\n")
    assert resolve_host(cfg, "slow1").connect_timeout == 30.0  # the first match wins, as in OpenSSH
    assert resolve_host(cfg, "gpu1").connect_timeout == 4.0
    assert resolve_host(cfg, "none").connect_timeout is None
    with pytest.raises(NodeFault, match="ConnectTimeout 'soon' for bad is not a positive number") as fault:
        resolve_host(cfg, "bad")
    assert (fault.value.kind, fault.value.stage) == ("config", "connect")
    path = tmp_path / "ssh_config"
    t = SSHTransport(ssh_config=path)  # no flag: each host's own value, else 10 s
    assert [t.connect_timeout_for(t._spec(h)) for h in ("slow1", "gpu1", "none")] == [30.0, 4.0, 10.0]
    flag = SSHTransport(ssh_config=path, connect_timeout=2)  # --connect-timeout wins for every host
    assert [flag.connect_timeout_for(flag._spec(h)) for h in ("slow1", "gpu1", "none")] == [2.0, 2.0, 2.0]
    (tmp_path / "empty").mkdir()
    assert resolve_host(_config(tmp_path / "empty", ""), "x").connect_timeout is None


class _Silent:
    """A TCP listener that accepts and never speaks: the SSH banner never comes (a bounded
    wait on a real connection, on this machine's loopback)."""

    def __enter__(self) -> int:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.held: list[Any] = []
        self.stop = False

        def accept() -> None:
            self.sock.settimeout(0.2)
            while not self.stop:
                try:
                    self.held.append(self.sock.accept()[0])
                except OSError:
                    continue

        self.thread = threading.Thread(target=accept, daemon=True)
        self.thread.start()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.stop = True
        self.thread.join(2)
        for c in self.held:
            c.close()
        self.sock.close()


def test_a_hosts_connect_timeout_bounds_a_real_connection_and_the_flag_wins(tmp_path: Path) -> None:
    with _Silent() as port:
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host quiet\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  ConnectTimeout 1\n")
        probe = [Probe.of("hostname", ["hostname"])]
        start = time.monotonic()
        with SSHTransport(ssh_config=cfg, deadline=30) as t:
            o = t.collect({"quiet": probe})["quiet"]
        took = time.monotonic() - start
        assert o.detail == {"kind": "timeout", "stage": "banner"}, o
        assert "sent no SSH banner within 1 s" in o.error and took < 8, (took, o.error)  # not the default 10 s
        with SSHTransport(ssh_config=cfg, connect_timeout=2, deadline=30) as t:
            o = t.collect({"quiet": probe})["quiet"]
        assert "sent no SSH banner within 2 s" in o.error, o.error


def test_the_cli_takes_the_connect_timeout_from_the_ssh_config(tmp_path: Path) -> None:
    import os

    with _Silent() as port:
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host quiet\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  ConnectTimeout 1\n")
        env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_CONFIG", "SLURM_JOB_ID")}
        base = [sys.executable, "-m", "preflight.cli", "run", "--hosts", "quiet", "--transport", "ssh", "--ssh-config",
                str(cfg), "--no-sweep", "--no-report", "--history", "off", "--json"]
        for extra, seconds in (([], 1), (["--connect-timeout", "2"], 2)):
            p = subprocess.run(base + extra, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
            doc = json.loads(p.stdout)
            root = next(r for r in doc["results"] if r["check"] == "node.reachable")
            assert f"sent no SSH banner within {seconds} s" in root["summary"], root


def _job() -> _Job:
    import threading
    from collections import deque

    return _Job(node="n3", probes=[], round=_Round(cond=threading.Condition(), pending=deque(), progress=None))


def test_host_key_unknown_changed_and_accept_new(tmp_path: Path) -> None:
    server = paramiko.ECDSAKey.generate()
    other = paramiko.ECDSAKey.generate()
    kh = tmp_path / "known_hosts"
    transport = SSHTransport(ssh_config=None)
    spec = HostSpec(alias="n3", hostname="10.9.9.3", known_hosts=(kh,), global_known_hosts=())
    with pytest.raises(NodeFault) as unknown:
        transport._verify_host_key(_job(), spec, server, transport._known_keys(spec))
    assert unknown.value.kind == "hostkey-unknown"
    assert unknown.value.message.startswith(f"unknown host key for n3 (not in {kh}); add it with ssh-keyscan")
    kh.write_text(f"n3,10.9.9.3 {other.get_name()} {other.get_base64()}\n")
    with pytest.raises(NodeFault) as changed:
        transport._verify_host_key(_job(), spec, server, transport._known_keys(spec))
    assert changed.value.kind == "hostkey-changed" and "host key for n3 does not match known_hosts" in changed.value.message
    kh.write_text("")
    accepting = SSHTransport(ssh_config=None, accept_new_host_keys=True)
    accepting._verify_host_key(_job(), spec, server, accepting._known_keys(spec))  # accepted and written down
    assert server.get_base64() in kh.read_text()
    transport._verify_host_key(_job(), spec, server, transport._known_keys(spec))  # now known
    # a changed key is refused even when new keys are accepted
    with pytest.raises(NodeFault) as again:
        accepting._verify_host_key(_job(), spec, other, accepting._known_keys(spec))
    assert again.value.kind == "hostkey-changed"


def test_a_hosts_settings_are_resolved_once_and_a_fault_is_given_every_time(tmp_path: Path) -> None:
    """The transport reads a host's settings once (every phase and the address map ask again);
    a host whose settings are wrong gets the same fault on every ask, never a cached success."""
    cfg = tmp_path / "config"
    cfg.write_text("Host n1\n  HostName 10.0.0.1\nHost bad\n  Port twenty\n")
    t = SSHTransport(ssh_config=cfg)
    first = t._spec("n1")
    assert t._spec("n1") is first and first.hostname == "10.0.0.1"
    faults = []
    for _ in range(2):
        with pytest.raises(NodeFault) as got:
            t._spec("bad")
        faults.append((got.value.kind, got.value.stage, got.value.message))
    assert faults[0] == faults[1] == ("config", "connect", "Port 'twenty' for bad is not a number")
    with pytest.raises(NodeFault, match="refusing the host name"):
        t._spec("a;b")


def test_known_hosts_parsed_once_while_unchanged_and_again_after_an_edit(tmp_path: Path) -> None:
    """Every node looks its key up in the same known_hosts files: one parse serves them all
    until the file changes (an edit, a replacement of the same size, a key accepted this run)."""
    kh = tmp_path / "known_hosts"
    a, b = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    kh.write_text(f"n1 {a.get_name()} {a.get_base64()}\n")
    t = SSHTransport(ssh_config=None)
    spec = HostSpec(alias="n1", hostname="n1", known_hosts=(kh,), global_known_hosts=())
    parsed = t._host_keys(kh)
    assert parsed is not None and t._host_keys(kh) is parsed
    assert [k.get_base64() for _, k in t._known_keys(spec)] == [a.get_base64()]
    replacement = tmp_path / "known_hosts.new"  # same length, other key, moved into place
    replacement.write_text(f"n1 {b.get_name()} {b.get_base64()}\n")
    assert replacement.stat().st_size == kh.stat().st_size
    replacement.replace(kh)
    assert [k.get_base64() for _, k in t._known_keys(spec)] == [b.get_base64()]
    with pytest.raises(NodeFault) as changed:
        t._verify_host_key(_job(), spec, a, t._known_keys(spec))
    assert changed.value.kind == "hostkey-changed"
    kh.unlink()
    assert t._host_keys(kh) is None and t._known_keys(spec) == []


# ---- the real cluster -------------------------------------------------------------------------

GPU_LINE = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e1f0c7a-{i}b2d-4c1e-9a77-0f3d2c1b{i}e44)\n"


def _healthy(cluster: NetCluster) -> None:
    for node in cluster.nodes:
        cluster.scenario(node.name, {"nvidia-smi": [{"match": "-L", "text": GPU_LINE.format(i=node.index)}]})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    missing = prerequisites()
    need(not missing, f"test cluster prerequisites missing: {', '.join(missing)}")
    c = NetCluster(4, tmp_path_factory.mktemp("sshcluster"), prefix=PREFIX, subnet=SUBNET)
    try:
        c.up(["nvidia-smi"])
        _healthy(c)
        yield c
    finally:
        c.down()


@pytest.fixture()
def healthy(cluster: NetCluster) -> Iterator[NetCluster]:
    _healthy(cluster)
    yield cluster
    _healthy(cluster)


def bundle(timeout: float = 10) -> list[list[Any]]:
    return [["hostname", ["hostname"], timeout], ["nvidia-smi-L", ["nvidia-smi", "-L"], timeout]]


def drive(cluster: NetCluster, config: Path, bundles: dict[str, list[list[Any]]], rounds: int = 1,
          limit: float = 120, **opts: Any) -> dict[str, Any]:
    spec = {"config": str(config), "opts": opts, "rounds": rounds, "bundles": bundles}
    p = cluster.client(sys.executable, str(DRIVE), json.dumps(spec), check=False, timeout=limit)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def write_config(cluster: NetCluster, name: str, extra: str) -> Path:
    path = cluster.workdir / name
    path.write_text(cluster.ssh_config.read_text() + extra)
    return path


def entry(alias: str, host: str, key: Path, known: Path, more: str = "") -> str:
    return (f"Host {alias}\n  HostName {host}\n  User root\n  IdentityFile {key}\n  UserKnownHostsFile {known}\n"
            f"  StrictHostKeyChecking yes\n{more}\n")


def accepted_count(cluster: NetCluster, node: str) -> int:
    return (cluster.node(node).home / "sshd.log").read_text().count("Accepted publickey")


def assert_ok(outcome: dict[str, Any], node: str) -> None:
    assert outcome["error"] == "", outcome
    assert outcome["captures"]["hostname"]["stdout"].strip() == node
    assert outcome["captures"]["nvidia-smi-L"]["stdout"].startswith("GPU 0: NVIDIA H100")


@pytest.mark.real
def test_all_nodes_answer_and_connections_are_reused(healthy: NetCluster) -> None:
    cluster = healthy
    before = {n.name: accepted_count(cluster, n.name) for n in cluster.nodes}
    res = drive(cluster, cluster.ssh_config, {n.name: bundle() for n in cluster.nodes}, rounds=2,
                connect_timeout=5, command_timeout=20)
    for rnd in res["rounds"]:
        for node in cluster.nodes:
            assert_ok(rnd["outcomes"][node.name], node.name)
    # one login per node for both rounds: the second collect reused the connections
    time.sleep(0.2)
    assert {n.name: accepted_count(cluster, n.name) - before[n.name] for n in cluster.nodes} == {
        n.name: 1 for n in cluster.nodes}
    # progress came per capture: 2 probes x 4 nodes x 2 rounds
    assert len(res["progress"]) == 16


@pytest.mark.real
def test_faults_stay_on_their_node(healthy: NetCluster) -> None:
    cluster = healthy
    c, w = cluster, cluster.workdir
    n2, n3 = cluster.node("n2"), cluster.node("n3")
    stranger = w / "stranger_key"
    if not stranger.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    empty_kh = w / "known_hosts_empty"
    empty_kh.write_text("")
    swapped = w / "known_hosts_swapped"  # n3's address with n1's key: a changed host key
    n1_key = " ".join((cluster.node("n1").home / "ssh_host_ed25519_key.pub").read_text().split()[:2])
    swapped.write_text(f"{n3.addr} {n1_key}\n")
    config = write_config(cluster, "faults_config", "".join([
        entry("gone", f"{SUBNET}.99", c.key, c.known_hosts),
        entry("refused", n2.addr, c.key, c.known_hosts, "  Port 2222\n"),
        entry("nodns", "no-such-node.invalid", c.key, c.known_hosts),
        entry("wrongkey", n2.addr, stranger, c.known_hosts),
        entry("nohostkey", n3.addr, c.key, empty_kh),
        entry("changed", n3.addr, c.key, swapped),
    ]))
    cluster.scenario("n4", {"nvidia-smi": [{"match": "-L", "hang": True}]})
    nodes = ["n1", "n2", "n3", "n4", "gone", "refused", "nodns", "wrongkey", "nohostkey", "changed"]
    res = drive(cluster, config, {n: bundle(timeout=30) for n in nodes}, connect_timeout=3, command_timeout=6)
    out = res["rounds"][0]["outcomes"]
    for node in ("n1", "n2", "n3"):
        assert_ok(out[node], node)
    gone = out["gone"]
    assert gone["detail"]["stage"] == "connect" and gone["detail"]["kind"] in ("unreachable", "timeout"), gone
    assert out["refused"]["detail"] == {"kind": "refused", "stage": "connect"}
    assert "refused the connection" in out["refused"]["error"]
    assert out["nodns"]["detail"] == {"kind": "dns", "stage": "connect"}
    assert "no-such-node.invalid" in out["nodns"]["error"]
    assert out["wrongkey"]["detail"] == {"kind": "auth", "stage": "auth"}
    assert "rejected every key for user root" in out["wrongkey"]["error"] and "stranger_key" in out["wrongkey"]["error"]
    unknown = out["nohostkey"]
    assert unknown["detail"]["kind"] == "hostkey-unknown" and unknown["detail"]["stage"] == "kex"
    assert unknown["error"] == (f"unknown host key for nohostkey (not in {empty_kh}); add it with ssh-keyscan "
                                "or pass --ssh-accept-new")
    changed = out["changed"]
    assert changed["detail"]["kind"] == "hostkey-changed"
    assert changed["error"].startswith(f"host key for changed does not match known_hosts ({swapped})")
    hung = out["n4"]  # nvidia-smi hangs: the command timeout ends n4, the finished probe is kept
    assert hung["detail"] == {"kind": "timeout", "stage": "command", "connection": "alive"}, hung
    assert "still running: nvidia-smi-L" in hung["error"] and "probes hang on the node" in hung["error"]
    assert hung["captures"]["hostname"]["stdout"].strip() == "n4"
    assert 5.5 < hung["duration"] < 15
    assert res["rounds"][0]["elapsed"] < 3 * (3 + 6), res["rounds"][0]["elapsed"]
    assert res["total"] < 3 * (3 + 6)


@pytest.mark.real
def test_global_deadline_ends_pending_nodes(healthy: NetCluster) -> None:
    cluster = healthy
    cluster.scenario("n2", {"nvidia-smi": [{"match": "-L", "hang": True}]})
    bundles = {n.name: bundle(timeout=60) for n in cluster.nodes}
    res = drive(cluster, cluster.ssh_config, bundles, connect_timeout=5, command_timeout=60, deadline=5)
    rnd = res["rounds"][0]
    out = rnd["outcomes"]
    for node in ("n1", "n3", "n4"):
        assert_ok(out[node], node)
    assert out["n2"]["detail"] == {"kind": "deadline", "stage": "command"}
    assert "5 s deadline of the whole collection passed" in out["n2"]["error"]
    assert out["n2"]["captures"]["hostname"]["stdout"].strip() == "n2"
    assert 4.9 < rnd["elapsed"] < 7 and res["total"] < 15


@pytest.mark.real
def test_deadline_reaches_nodes_still_queued(healthy: NetCluster) -> None:
    cluster = healthy
    for node in cluster.nodes:
        cluster.scenario(node.name, {"nvidia-smi": [{"match": "-L", "delay": 2, "text": "GPU 0: NVIDIA H100\n"}]})
    res = drive(cluster, cluster.ssh_config, {n.name: bundle() for n in cluster.nodes}, concurrency=1, deadline=3)
    rnd = res["rounds"][0]
    stages = sorted(o["detail"].get("stage", "ok") for o in rnd["outcomes"].values())
    assert stages.count("queued") >= 1 and stages.count("ok") <= 2, stages  # one node at a time, 2+ s each
    for o in rnd["outcomes"].values():
        assert o["error"] == "" or o["detail"]["kind"] == "deadline", o
    queued = next(o for o in rnd["outcomes"].values() if o["detail"].get("stage") == "queued")
    assert "passed before" in queued["error"]
    assert rnd["elapsed"] < 4.5


@pytest.mark.real
def test_concurrency_limit_two_of_four(healthy: NetCluster) -> None:
    cluster = healthy
    for node in cluster.nodes:
        cluster.scenario(node.name, {"nvidia-smi": [{"match": "-L", "delay": 1, "text": GPU_LINE.format(i=1)}]})
    res = drive(cluster, cluster.ssh_config, {n.name: bundle() for n in cluster.nodes}, concurrency=2)
    rnd = res["rounds"][0]
    for node in cluster.nodes:
        assert_ok(rnd["outcomes"][node.name], node.name)
    assert 2.0 <= rnd["elapsed"] < 10  # two waves of ~1 s each


@pytest.mark.real
def test_remote_python_missing_and_garbage(healthy: NetCluster) -> None:
    cluster = healthy
    res = drive(cluster, cluster.ssh_config, {"n1": bundle()}, remote_python="python3-nowhere")
    o = res["rounds"][0]["outcomes"]["n1"]
    assert o["detail"] == {"kind": "python-missing", "stage": "command"}
    assert o["error"].startswith("python3-nowhere was not found on n1 (exit 127")
    # a remote "python" that prints something else entirely
    res = drive(cluster, cluster.ssh_config, {"n1": bundle()},
                remote_python="printf 'Welcome to n1\\nDisk quota exceeded\\n'; true")
    o = res["rounds"][0]["outcomes"]["n1"]
    assert o["detail"]["kind"] == "garbage" and o["detail"]["stage"] == "command"
    assert "not preflight's probe bundle" in o["error"] and "'Welcome to n1'" in o["error"]
    assert "Disk quota exceeded" in o["detail"]["sample"]


@pytest.mark.real
def test_accept_new_host_key(healthy: NetCluster) -> None:
    cluster = healthy
    kh = cluster.workdir / "known_hosts_accept"
    kh.write_text("")
    config = write_config(cluster, "accept_config", entry("fresh", cluster.node("n2").addr, cluster.key, kh))
    refused = drive(cluster, config, {"fresh": bundle()})["rounds"][0]["outcomes"]["fresh"]
    assert refused["detail"]["kind"] == "hostkey-unknown"
    accepted = drive(cluster, config, {"fresh": bundle()}, accept_new_host_keys=True)["rounds"][0]["outcomes"]["fresh"]
    assert accepted["error"] == "" and accepted["captures"]["hostname"]["stdout"].strip() == "n2"
    assert cluster.node("n2").addr in kh.read_text()
    again = drive(cluster, config, {"fresh": bundle()})["rounds"][0]["outcomes"]["fresh"]
    assert again["error"] == ""


@pytest.mark.real
def test_proxyjump_through_one_node_to_another(healthy: NetCluster) -> None:
    cluster = healthy
    c = cluster
    n4 = cluster.node("n4")
    config = write_config(cluster, "jump_config", "".join([
        entry("n4-via-n1", n4.addr, c.key, c.known_hosts, "  ProxyJump n1\n"),
        entry("gone-via-n1", f"{SUBNET}.99", c.key, c.known_hosts, "  ProxyJump n1\n"),
    ]))
    # the client cannot reach n4 directly any more: only the jump through n1 gets there
    cluster.client("ip", "route", "add", "blackhole", f"{n4.addr}/32")
    try:
        res = drive(cluster, config, {"n4-via-n1": bundle(), "n4": bundle(), "gone-via-n1": bundle()},
                    connect_timeout=3, command_timeout=10)
    finally:
        cluster.client("ip", "route", "del", "blackhole", f"{n4.addr}/32", check=False)
    out = res["rounds"][0]["outcomes"]
    assert_ok(out["n4-via-n1"], "n4")
    assert out["n4"]["detail"]["stage"] == "connect" and out["n4"]["error"]
    gone = out["gone-via-n1"]
    assert gone["detail"].get("via") == "n1" and gone["detail"]["stage"] == "connect", gone
    assert gone["detail"]["kind"] in ("unreachable", "timeout")
    assert "jump host n1" in gone["error"]

    assert f"from {cluster.node('n1').addr}" in (n4.home / "sshd.log").read_text()


@pytest.mark.real
def test_mtu_mismatch_on_one_port(healthy: NetCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """n3's switch port at 1500 while everything else runs 9000: jumbo frames vanish silently.

    The handshake's packets are small and get through. TCP's offloaded segments cross the
    veth pair whatever their size, but a single full-size segment does not: a capture of a
    few KB (one segment of more than 1500 bytes) never arrives, and everything behind it on
    the same connection waits with it. The transport must say so, not blame the probes."""
    cluster = healthy
    big = GPU_LINE.format(i=3) * 60  # ~5 KB of nvidia-smi output: one segment > 1500 bytes
    cluster.scenario("n3", {"nvidia-smi": [{"match": "-L", "text": big}]})
    # a 2000-character user name makes the first authentication packet ~2.2 KB (one segment)
    long_user = "u" * 2000
    c, n2, n3 = cluster, cluster.node("n2"), cluster.node("n3")
    config = write_config(cluster, "mtu_config", "".join(
        entry(alias, node.addr, c.key, c.known_hosts).replace("User root", f"User {long_user}")
        for alias, node in (("n3-longuser", n3), ("n2-longuser", n2))))
    cluster.set_port_mtu("n3", 1500)
    try:
        ping = cluster.client("ping", "-c", "1", "-W", "1", "-M", "do", "-s", "8000", n3.addr, check=False)
        res = drive(cluster, config, {n: bundle() for n in ("n1", "n2", "n3", "n4", "n3-longuser", "n2-longuser")},
                    connect_timeout=3, command_timeout=6)
    finally:
        cluster.set_port_mtu("n3", cluster.mtu)
    assert ping.returncode != 0  # the jumbo ping is lost
    out = res["rounds"][0]["outcomes"]
    for node in ("n1", "n2", "n4"):
        assert_ok(out[node], node)
    with capsys.disabled():
        for name in ("n3", "n3-longuser", "n2-longuser"):
            print(f"\nMTU 1500 on n3's port, {name}: {json.dumps(out[name]['detail'])} {out[name]['error']}")
    # small handshake, small command reply, then a capture larger than 1500 bytes: lost
    got = out["n3"]
    assert got["detail"] == {"kind": "timeout", "stage": "command", "connection": "stalled"}, got
    assert "MTU black hole" in got["error"] and "stalled while the probes ran: 1 of 2 came back" in got["error"]
    assert got["captures"]["hostname"]["stdout"].strip() == "n3"  # the small capture came through
    # a large first authentication packet: the classic stall right after key exchange
    stalled = out["n3-longuser"]
    assert stalled["detail"] == {"kind": "timeout", "stage": "auth"}, stalled
    assert stalled["error"].startswith("SSH stalled after key exchange with n3-longuser")
    assert "MTU black hole" in stalled["error"]
    # the same packet on a 9000 port arrives, and the unknown user is simply refused
    assert out["n2-longuser"]["detail"] == {"kind": "auth", "stage": "auth"}, out["n2-longuser"]
    assert res["rounds"][0]["elapsed"] < 3 * (3 + 6)



# ---- long-running commands (spawn), through tests/transport/_spawn_drive.py ----------------------

SPAWN = Path(__file__).with_name("_spawn_drive.py")


def spawn(cluster: NetCluster, config: Path, commands: dict[str, list[str]], limit: float = 60,
          **spec: Any) -> dict[str, Any]:
    doc = {"config": str(config), "commands": commands, **spec}
    p = cluster.client(sys.executable, str(SPAWN), json.dumps(doc), check=False, timeout=limit)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def said(run: dict[str, Any]) -> list[str]:
    return [line for _, line in run["lines"]]


@pytest.mark.real
def test_spawned_commands_stream_their_lines_and_read_their_stdin(healthy: NetCluster) -> None:
    """stdout and stderr lines come back as they are written (not at the end), stdin written
    before the command started reaches it, closing stdin is EOF there, the exit status comes back."""
    cluster = healthy
    script = "echo up; sleep 1; cat; echo said-$(hostname) >&2; exit 3"
    res = spawn(cluster, cluster.ssh_config, {n: ["sh", "-c", script] for n in ("n1", "n2")},
                stdin={"n1": "hello\n", "n2": "hi there\n"}, close_stdin=True, opts={"connect_timeout": 5})
    for node, text in (("n1", "hello"), ("n2", "hi there")):
        run = res[node]
        assert said(run) == ["up", text, f"said-{node}"], run
        assert run["rc"] == 3 and run["failure"] is None and run["ended"], run
        assert run["lines"][1][0] - run["lines"][0][0] > 0.8, run  # "up" arrived before the sleep ended
        assert run["ended_at"] >= run["lines"][-1][0]


@pytest.mark.real
def test_stop_closes_stdin_first_then_the_session(healthy: NetCluster) -> None:
    """The command sees EOF on its stdin (an agent then ends its ranks); one that keeps running
    past the grace has its session closed: no exit status, no fault of its own, bounded."""
    cluster = healthy
    marker = cluster.workdir / "spawn-eof-n3"
    marker.unlink(missing_ok=True)
    script = f"echo up; cat >/dev/null; echo eof > {marker}; sleep 60"
    res = spawn(cluster, cluster.ssh_config, {"n3": ["sh", "-c", script]}, stop_after=2, stop_grace=1, wait=5,
                opts={"connect_timeout": 5})
    run = res["n3"]
    assert said(run) == ["up"] and run["ended"] and run["rc"] is None and run["failure"] is None, run
    assert marker.read_text().strip() == "eof"
    assert res["_elapsed"] < 2 + 1 + 4, res["_elapsed"]


@pytest.mark.real
def test_spawn_faults_are_the_transports_own(healthy: NetCluster) -> None:
    """A command that cannot start says why in the words `collect` uses (host key, refused,
    unreachable, login), on its node only, within the connect budget; the others run."""
    cluster = healthy
    c, w = cluster, cluster.workdir
    n2, n3 = cluster.node("n2"), cluster.node("n3")
    stranger = w / "stranger_key"
    if not stranger.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    swapped = w / "known_hosts_swapped_spawn"
    n1_key = " ".join((cluster.node("n1").home / "ssh_host_ed25519_key.pub").read_text().split()[:2])
    swapped.write_text(f"{n3.addr} {n1_key}\n")
    config = write_config(cluster, "spawn_faults_config", "".join([
        entry("gone", f"{SUBNET}.99", c.key, c.known_hosts),
        entry("refused", n2.addr, c.key, c.known_hosts, "  Port 2222\n"),
        entry("wrongkey", n2.addr, stranger, c.known_hosts),
        entry("changed", n3.addr, c.key, swapped),
    ]))
    nodes = ["n1", "gone", "refused", "wrongkey", "changed"]
    res = spawn(cluster, config, {n: ["sh", "-c", "echo ran-$(hostname)"] for n in nodes}, wait=20,
                opts={"connect_timeout": 3})
    assert said(res["n1"]) == ["ran-n1"] and res["n1"]["rc"] == 0 and res["n1"]["failure"] is None
    fails = {n: res[n]["failure"] for n in nodes[1:]}
    assert all(f is not None for f in fails.values()), fails
    assert fails["gone"]["detail"]["kind"] in ("unreachable", "timeout"), fails["gone"]
    assert fails["refused"]["detail"] == {"kind": "refused", "stage": "connect"}
    assert "refused the connection" in fails["refused"]["error"]
    assert fails["wrongkey"]["detail"] == {"kind": "auth", "stage": "auth"}
    assert "rejected every key for user root" in fails["wrongkey"]["error"]
    assert fails["changed"]["detail"]["kind"] == "hostkey-changed"
    assert fails["changed"]["error"].startswith(f"host key for changed does not match known_hosts ({swapped})")
    assert all(res[n]["ended"] and res[n]["rc"] is None and said(res[n]) == [] for n in nodes[1:])
    assert res["_elapsed"] < 3 * 3 + 3, res["_elapsed"]


@pytest.mark.real
def test_a_stall_after_key_exchange_is_named_as_collect_names_it(healthy: NetCluster) -> None:
    """n4's switch port drops jumbo frames: the key exchange's small packets pass, the first
    authentication packet (one 2.2 KB segment: a long user name) does not. A spawned command
    gets the same stalled-after-key-exchange diagnosis as `collect`, within the connect budget."""
    cluster = healthy
    c, n4 = cluster, cluster.node("n4")
    config = write_config(cluster, "spawn_mtu_config", entry("n4-longuser", n4.addr, c.key, c.known_hosts)
                          .replace("User root", f"User {'u' * 2000}"))
    cluster.set_port_mtu("n4", 1500)
    try:
        res = spawn(cluster, config, {n: ["sh", "-c", "echo ok-$(hostname)"] for n in ("n1", "n4-longuser")},
                    wait=30, opts={"connect_timeout": 3})
    finally:
        cluster.set_port_mtu("n4", cluster.mtu)
    assert said(res["n1"]) == ["ok-n1"] and res["n1"]["rc"] == 0
    fail = res["n4-longuser"]["failure"]
    assert fail is not None and fail["detail"] == {"kind": "timeout", "stage": "auth"}, res["n4-longuser"]
    assert fail["error"].startswith("SSH stalled after key exchange with n4-longuser") and "MTU black hole" in fail["error"]
    assert res["_elapsed"] < 3 * 3 + 3, res["_elapsed"]

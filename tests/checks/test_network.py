"""net.nic and net.mtu: parsers, graders, and the ping pair run as real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import engine
from preflight import profile as profiles
from preflight.checks import mtu
from preflight.checks import network as net
from preflight.framing import frame
from preflight.model import Capture, CaptureState, Status
from preflight.parsers import ping as pingp
from preflight.parsers import sysfs
from preflight.parsers.ip import Interface
from preflight.registry import Options, PlanContext
from preflight.transport.local import LocalTransport
from tests import fakes
from tests.conftest import FIXTURES, capture, facts_of, fixture_text, grade

H100 = "h100-sxm-8x"


def nic(ip: str, env: str | None = None, speed: str | None = None, ib: str | None = None,
        profile: str = H100) -> list:
    caps = {"ip-addr": capture("ip-addr", fixture_text(f"ip/{ip}"))}
    if env:
        caps["env"] = capture("env", fixture_text(f"ip/{env}"))
    if speed:
        caps["ip-speed"] = capture("ip-speed", fixture_text(f"ip/{speed}"))
    if ib:
        caps["ib-devices"] = capture("ib-devices", fixture_text(f"ip/{ib}"))
    return grade("net.nic", caps, profile=profile)


# ----------------------------------------------------------------------------- parsers


def interfaces(text: str) -> list[Interface]:
    return facts_of("ip-addr", text).interfaces  # type: ignore[attr-defined]


def runs(text: str) -> list[pingp.PingRun]:
    return facts_of("ping", text).runs  # type: ignore[attr-defined]


def test_parse_ip_json_classifies_interfaces() -> None:
    ifaces = interfaces(fixture_text("ip/ip_j_d_addr_h100_healthy.json"))
    prof = profiles.load(H100)
    by = {i.name: i for i in ifaces}
    assert set(by) == {"lo", "eno1", "ens9f0np0", "eno2", "ibp26s0", "docker0", "veth4e1c2a9"}
    assert net.classify(by["lo"], prof) == "loopback"
    assert net.classify(by["docker0"], prof) == "virtual"
    assert net.classify(by["veth4e1c2a9"], prof) == "virtual"
    assert net.classify(by["ibp26s0"], prof) == "ipoib"
    assert net.classify(by["ens9f0np0"], prof) == "data"
    assert by["ens9f0np0"].mtu == 9000 and by["ens9f0np0"].up
    assert not by["eno2"].up
    assert by["lo"].up  # UNKNOWN + UP,LOWER_UP
    assert by["veth4e1c2a9"].master == "docker0"


def test_parse_ip_text_layout_with_at_names_and_kinds() -> None:
    ifaces = interfaces(fixture_text("ip/ip_d_addr_text_mtu_mixed.txt"))
    by = {i.name: i for i in ifaces}
    assert by["enp65s0f1np1"].mtu == 1500
    assert by["virbr0"].kind == "bridge" and by["virbr0"].state == "DOWN"
    assert by["cali8d3f1a2b9c4"].kind == "veth"
    assert by["enp65s0f0np0"].addresses == ["10.60.8.14/20"]
    assert by["enp65s0f0np0"].parentbus == "pci"


def test_parse_ip_json_skips_empty_objects() -> None:
    ifaces = interfaces(fixture_text("ip/ip_j_d_addr_container_veth_only.json"))
    assert [i.name for i in ifaces] == ["lo", "eth0"]


@pytest.mark.parametrize("text", ["", "garbage", "[1, 2", "{\"ifname\": 1}", "\x00\x01"])
def test_parse_interfaces_garbage_never_raises(text: str) -> None:
    assert interfaces(text) == []


def test_parse_speeds_and_env_keep_only_relevant() -> None:
    doc = frame(fixture_text("ip/speed_h100.txt") + "grep: /sys/class/net/lo/speed: Invalid argument\n").docs[0]
    sp = sysfs.parse_speeds(doc).mbps
    assert sp["ens9f0np0"] == 200000 and sp["eno2"] == -1 and "lo" not in sp
    env = sysfs.parse_env(frame(fixture_text("ip/env_job_ok.txt")).docs[0]).vars
    assert env["NCCL_SOCKET_IFNAME"] == "=ens9f0np0"
    assert "WANDB_API_KEY" not in env and "PATH" not in env  # nothing else is kept


def test_iflist_semantics() -> None:
    names = ["lo", "docker0", "eth0", "eth1", "ens9f0np0"]
    assert net.parse_iflist("eth").allowed(names) == ["eth0", "eth1"]
    assert net.parse_iflist("=eth0").allowed(names) == ["eth0"]
    assert net.parse_iflist("^docker,lo").allowed(names) == ["eth0", "eth1", "ens9f0np0"]
    assert net.parse_iflist("^=docker0").allowed(names) == ["lo", "eth0", "eth1", "ens9f0np0"]
    hca = net.parse_iflist("=mlx5_0:1,mlx5_3:1")
    assert hca.exact and hca.entries == ["mlx5_0", "mlx5_3"] and hca.ports["mlx5_0"] == "1"


# ----------------------------------------------------------------------------- net.nic

def test_nic_healthy_passes() -> None:
    [r] = nic("ip_j_d_addr_h100_healthy.json", env="env_job_ok.txt", speed="speed_h100.txt", ib="ib_devices_12.txt")
    assert r.status is Status.PASS, r.summary
    names = {i["name"]: i for i in r.facts["interfaces"]}
    assert names["ens9f0np0"]["mtu"] == 9000 and names["ens9f0np0"]["state"] == "UP"
    assert r.facts["data_plane"] == ["ens9f0np0"]
    assert "WANDB_API_KEY" not in str(r.facts)


def test_nic_wrong_mtu_fails_when_declared_by_env() -> None:
    [r] = nic("ip_j_d_addr_data_mtu1500.json", env="env_job_ok.txt")
    assert r.status is Status.FAIL
    assert "ens9f0np0 MTU 1500" in r.summary
    assert any("mtu 1500" in e for e in r.evidence)
    assert "ip link set dev ens9f0np0 mtu 9000" in r.remedy


def test_nic_wrong_mtu_auto_detected_is_warn() -> None:
    [r] = nic("ip_d_addr_text_mtu_mixed.txt")
    assert r.status is Status.WARN
    assert "enp65s0f1np1" in r.summary
    # virbr0 (down, with an address) and the calico veth are not data plane
    assert "virbr0" not in r.summary and "cali" not in r.summary


def test_nic_data_nic_down_fails() -> None:
    [r] = nic("ip_j_d_addr_data_nic_down.json")
    assert r.status is Status.FAIL
    assert r.summary == "ens9f0np0 is DOWN with address 10.45.3.21/16"
    assert r.facts["codes"] == ["net.nic/addressed-nic-down"]
    assert "cable" in r.remedy


def test_nic_unused_port_without_address_is_not_a_failure() -> None:
    [r] = nic("ip_j_d_addr_h100_healthy.json")  # eno2 is down with no address
    assert r.status is Status.PASS, r.summary


def test_nic_slow_link_graded_against_profile(tmp_path: Path) -> None:
    prof = tmp_path / "site.toml"
    prof.write_text('[profile]\nname = "site"\nextends = "h100-sxm-8x"\n[net]\n'
                    'min_speed_mbps = { value = 200000, source = "site: 200G data plane" }\n'
                    'interfaces = { value = ["ens9f0np0"], source = "site data-plane NIC" }\n')
    [r] = nic("ip_j_d_addr_h100_healthy.json", speed="speed_degraded.txt", profile=str(prof))
    assert r.status is Status.FAIL
    assert "100000 Mb/s" in r.summary and "200000" in r.summary
    assert any("site: 200G" in e for e in r.evidence)


def test_nic_profile_interface_missing(tmp_path: Path) -> None:
    prof = tmp_path / "site.toml"
    prof.write_text('[profile]\nname = "site2"\nextends = "generic"\n[net]\n'
                    'interfaces = { value = ["ens9f0np0", "ens10f0np0"], source = "site" }\n')
    [r] = nic("ip_j_d_addr_h100_healthy.json", profile=str(prof))
    assert r.status is Status.FAIL
    assert "ens10f0np0 is missing" in r.summary


def test_nic_env_names_missing_interfaces_and_hcas() -> None:
    [r] = nic("ip_j_d_addr_h100_healthy.json", env="env_job_bad.txt", ib="ib_devices_12.txt")
    assert r.status is Status.FAIL
    problems = " | ".join(r.facts["problems"])
    assert "NCCL_SOCKET_IFNAME entry 'eth' matches no interface" in problems
    assert "GLOO_SOCKET_IFNAME entry 'eth0' matches no interface" in problems
    assert "NCCL_IB_HCA entry 'mlx5_14' matches no RDMA device" in problems
    # prefix mlx5_1 also catches mlx5_10 / mlx5_11
    assert "NCCL_IB_HCA prefix 'mlx5_1' also matches mlx5_10, mlx5_11" in problems
    assert "NCCL_SOCKET_IFNAME=eth" in r.evidence


def test_nic_exclude_list_that_allows_lo_warns() -> None:
    [r] = nic("ip_j_d_addr_h100_healthy.json", env="env_exclude_allows_lo.txt")
    assert r.status is Status.WARN
    assert "allows lo" in r.summary
    assert "NCCL_SOCKET_IFNAME=^docker0" in r.evidence


def test_nic_ib_disable_on_ib_profile_fails() -> None:
    caps = {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json")),
            "env": capture("env", "PATH=/usr/bin\nHOME=/root\nNCCL_IB_DISABLE=1\n")}
    [r] = grade("net.nic", caps, profile=H100)
    assert r.status is Status.FAIL and "NCCL_IB_DISABLE=1" in r.summary


def test_nic_hca_set_but_no_rdma_devices() -> None:
    caps = {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json")),
            "env": capture("env", "NCCL_IB_HCA=mlx5_0\nPATH=/usr/bin\nHOME=/\n"),
            "ib-devices": capture("ib-devices", "", rc=2,
                                  stderr="ls: cannot access '/sys/class/infiniband': No such file or directory\n")}
    [r] = grade("net.nic", caps, profile=H100)
    assert r.status is Status.FAIL and "no RDMA devices" in r.summary


def test_nic_container_only_veth_warns() -> None:
    [r] = nic("ip_j_d_addr_container_veth_only.json")
    assert r.status is Status.WARN and "no data-plane NIC" in r.summary


@pytest.mark.parametrize("text", ["", "garbage\n", "[{]"])
def test_nic_garbage_is_error(text: str) -> None:
    [r] = grade("net.nic", {"ip-addr": capture("ip-addr", text)}, profile=H100)
    assert r.status is Status.ERROR and r.remedy


def test_nic_missing_ip_tool_is_skip() -> None:
    cap = Capture("ip-addr", ["ip", "-j", "-d", "addr"], CaptureState.MISSING, reason="ip not found on PATH")
    [r] = grade("net.nic", {"ip-addr": cap}, profile=H100)
    assert r.status is Status.SKIP


# ----------------------------------------------------------------------------- ping parser

def test_parse_ping_cases() -> None:
    [ok] = runs(fixture_text("ping/jumbo_ok.txt"))
    assert ok.size == 8972 and ok.loss == 0.0 and ok.received == 3
    text = fixture_text("ping/jumbo_local_too_long.stdout.txt") + "\n" + fixture_text("ping/jumbo_local_too_long.stderr.txt")
    [loc] = runs(text)
    assert loc.local_too_long and loc.local_too_long_mtu == 1500 and loc.errors == 3
    [frag] = runs(fixture_text("ping/jumbo_frag_needed.txt"))
    assert frag.frag_from == "10.45.0.1" and frag.frag_needed_mtu == 1500
    [silent] = runs(fixture_text("ping/jumbo_silent_loss.txt"))
    assert silent.loss == 100.0 and not silent.local_too_long and not silent.frag_from
    [unr] = runs(fixture_text("ping/small_unreachable.txt"))
    assert unr.unreachable and unr.loss == 100.0
    [unk] = runs("ping: nosuch.example: Name or service not known\n")
    assert unk.unresolved


def test_jumbo_outcomes() -> None:
    def run(name: str) -> pingp.PingRun:
        return runs(fixture_text(f"ping/{name}"))[0]

    small_ok = run("small_ok.txt")
    assert mtu.jumbo_outcome(run("jumbo_ok.txt"), small_ok)[0] == "ok"
    assert mtu.jumbo_outcome(run("jumbo_frag_needed.txt"), small_ok)[0] == "frag_needed"
    assert mtu.jumbo_outcome(run("jumbo_silent_loss.txt"), small_ok)[0] == "silent_loss"
    assert mtu.jumbo_outcome(run("jumbo_silent_loss.txt"), None)[0] == "no_reply"
    outcome, why = mtu.jumbo_outcome(run("jumbo_unreachable.txt"), run("small_unreachable.txt"))
    assert outcome == "unreachable" and "not an MTU problem" in why
    assert mtu.jumbo_outcome(pingp.PingRun(target="x"), small_ok)[0] == "unknown"


# ----------------------------------------------------------------------------- net.mtu

def test_peer_validation() -> None:
    for good in ["gpu-c032", "gpu-c032.cluster.local", "10.45.3.22", "fd00::2"]:
        assert mtu.valid_peer(good), good
    for bad in ["-oProxyCommand=x", "a b", "host;rm -rf /", "", "x" * 300, "fe80::1%eth0", "$(id)", "-c1"]:
        assert not mtu.valid_peer(bad), bad


def test_mtu_probes_are_static_argv_and_skip_invalid_peers() -> None:
    prof = profiles.load(H100)
    ctx = PlanContext(node="n1", profile=prof, options=Options(peers=["10.45.3.22", "-f", "fd00::2"]))
    probes = {p.name: p for p in mtu.mtu_probes(ctx)}
    assert set(probes) == {"ip-addr", "ping-jumbo-10.45.3.22", "ping-small-10.45.3.22",
                           "ping-jumbo-fd00::2", "ping-small-fd00::2"}
    argv = probes["ping-jumbo-10.45.3.22"].commands[0]
    assert argv[0] == "ping" and argv[-1] == "10.45.3.22"
    assert argv[argv.index("-s") + 1] == "8972" and argv[argv.index("-M") + 1] == "do"
    assert probes["ping-jumbo-fd00::2"].commands[0][argv.index("-s") + 1] == "8952"
    assert probes["ping-small-10.45.3.22"].commands[0][argv.index("-s") + 1] == "56"


def test_mtu_invalid_peer_is_error_without_probe() -> None:
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json"))},
                profile=H100, peers=["-oProxyCommand=touch /tmp/x"])
    assert r.status is Status.ERROR and "invalid peer" in r.summary


def _mtu_live(jumbo: str, small: str, stderr: str = "") -> list:
    caps = {
        "ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json")),
        "ping-jumbo-p1": capture("ping-jumbo-p1", fixture_text(f"ping/{jumbo}"), rc=1, stderr=stderr),
        "ping-small-p1": capture("ping-small-p1", fixture_text(f"ping/{small}")),
    }
    return grade("net.mtu", caps, profile=H100, peers=["p1"])


def test_mtu_grades_each_outcome() -> None:
    [r] = _mtu_live("jumbo_ok.txt", "small_ok.txt")
    assert r.status is Status.PASS and r.facts["outcome"] == "ok" and r.facts["size"] == 8972
    [r] = _mtu_live("jumbo_local_too_long.stdout.txt", "small_ok.txt",
                    stderr=fixture_text("ping/jumbo_local_too_long.stderr.txt"))
    assert r.status is Status.FAIL and r.facts["outcome"] == "local_too_small"
    assert any("message too long, mtu=1500" in e for e in r.evidence)
    [r] = _mtu_live("jumbo_frag_needed.txt", "small_ok.txt")
    assert r.status is Status.FAIL and r.facts["outcome"] == "frag_needed"
    assert "10.45.0.1" in r.remedy
    [r] = _mtu_live("jumbo_silent_loss.txt", "small_ok.txt")
    assert r.status is Status.FAIL and r.facts["outcome"] == "silent_loss"
    assert r.facts["peers"][0]["jumbo_loss"] == 100.0 and r.facts["peers"][0]["small_loss"] == 0.0
    [r] = _mtu_live("jumbo_unreachable.txt", "small_unreachable.txt")
    assert r.status is Status.ERROR and "not an MTU problem" in r.summary


def test_mtu_ping_timeout_counts_as_loss() -> None:
    caps = {
        "ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json")),
        "ping-jumbo-p1": Capture("ping-jumbo-p1", ["ping"], CaptureState.TIMEOUT, reason="killed after 5.6 s"),
        "ping-small-p1": capture("ping-small-p1", fixture_text("ping/small_ok.txt")),
    }
    [r] = grade("net.mtu", caps, profile=H100, peers=["p1"])
    assert r.facts["outcome"] == "silent_loss" and r.status is Status.FAIL


def test_mtu_ping_missing_is_skip() -> None:
    miss = Capture("ping-jumbo-p1", ["ping"], CaptureState.MISSING, reason="ping not found on PATH")
    caps = {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json")),
            "ping-jumbo-p1": miss, "ping-small-p1": miss}
    [r] = grade("net.mtu", caps, profile=H100, peers=["p1"])
    assert r.status is Status.SKIP


def test_mtu_without_peers_grades_configured_mtu() -> None:
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json"))},
                profile=H100)
    assert r.status is Status.PASS and r.facts["outcome"] == "ok"
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_data_mtu1500.json"))},
                profile=H100)
    assert r.facts["outcome"] == "local_too_small" and r.status in (Status.WARN, Status.FAIL)


def test_mtu_no_expectation_no_peers_is_skip() -> None:
    [r] = grade("net.mtu", {"ip-addr": capture("ip-addr", fixture_text("ip/ip_j_d_addr_h100_healthy.json"))},
                profile="generic")
    assert r.status is Status.SKIP


def test_mtu_analyze_transcripts() -> None:
    [r] = grade("net.mtu", {"ping": capture("ping", fixture_text("ping/transcript_black_hole_pair.txt"))},
                profile=H100, mode="analyze")
    assert r.status is Status.FAIL and r.facts["outcome"] == "silent_loss"
    assert r.facts["peers"][0]["peer"] == "gpu-c032"
    [r] = grade("net.mtu", {"ping": capture("ping", fixture_text("ping/transcript_old_iputils_local_error.txt"))},
                profile=H100, mode="analyze")
    assert r.facts["outcome"] == "local_too_small"
    assert {p["peer"] for p in r.facts["peers"]} == {"10.45.3.40", "10.45.3.41"}


def test_formats_detect_their_own_files_only(registry) -> None:  # noqa: ANN001
    from preflight.analyze import classify

    def kinds(rel: str) -> set[str]:
        return {f.name for d in frame(fixture_text(rel)).docs for f in classify(d, registry)}

    assert "ip-addr" in kinds("ip/ip_j_d_addr_h100_healthy.json")
    assert "ip-addr" in kinds("ip/ip_d_addr_text_mtu_mixed.txt")
    assert "ip-speed" in kinds("ip/speed_h100.txt")
    assert "env" in kinds("ip/env_job_ok.txt")
    assert "ping" in kinds("ping/transcript_black_hole_pair.txt")
    for rel in ("nccl/nccl_info_2node_ib_nvls.log", "nccl-tests/all_reduce_perf_1node_8xH100_nvls.txt",
                "watchdog/torch25_allreduce_timeout_rank3_missing.log"):
        assert not kinds(rel) & {"ip-addr", "ip-speed", "env", "ping", "ethtool", "link-events"}, rel


# ----------------------------------------------------------------------------- real processes

PEERS = {
    "10.45.3.22": ("jumbo_ok.txt", "", "small_ok.txt", "ok"),
    "10.45.3.30": ("jumbo_local_too_long.stdout.txt", "ping: local error: message too long, mtu=1500\n" * 3,
                   "small_ok.txt", "local_too_small"),
    "10.45.9.40": ("jumbo_frag_needed.txt", "", "small_ok.txt", "frag_needed"),
    "10.45.3.23": ("jumbo_silent_loss.txt", "", "small_ok.txt", "silent_loss"),
    "10.45.3.99": ("jumbo_unreachable.txt", "", "small_unreachable.txt", "unreachable"),
}


def _fake_ping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peers: dict) -> None:
    rules = []
    files: dict[str, str | Path] = {}
    for peer, (jumbo, jerr, small, _) in peers.items():
        esc = peer.replace(".", r"\.")
        rc_j = 0 if jumbo == "jumbo_ok.txt" else 1
        rc_s = 0 if small == "small_ok.txt" else 1
        rules.append({"match": rf"-M do -s 8972 .* {esc}$", "stdout": jumbo, "stderr": jerr, "rc": rc_j})
        rules.append({"match": rf"-M do -s 56 .* {esc}$", "stdout": small, "rc": rc_s})
        files[jumbo] = FIXTURES / "ping" / jumbo
        files[small] = FIXTURES / "ping" / small
    files["ip_addr_out.json"] = FIXTURES / "ip" / "ip_j_d_addr_h100_healthy.json"
    bin_dir = fakes.install(tmp_path / "bin", ["ping", "ip"])
    scen = fakes.scenario(tmp_path / "scen", {"ping": rules, "ip": [{"match": "-j -d addr", "stdout": "ip_addr_out.json"}]},
                          files)
    for k, v in fakes.env_for(bin_dir, scen).items():
        monkeypatch.setenv(k, v)


@pytest.mark.real
def test_mtu_real_processes_through_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry) -> None:  # noqa: ANN001
    _fake_ping(tmp_path, monkeypatch, PEERS)
    check = registry.checks["net.mtu"]
    results, used = engine.run(registry, [check], ["node1"], LocalTransport(), profile_name=H100,
                               options=Options(peers=list(PEERS)))
    [r] = results
    assert used["node1"].name == H100
    got = {p["peer"]: p["outcome"] for p in r.facts["peers"]}
    assert got == {peer: v[3] for peer, v in PEERS.items()}
    assert r.facts["outcome"] == "local_too_small" and r.status is Status.FAIL
    assert r.facts["size"] == 8972
    assert any("Frag needed" in e for e in r.evidence)
    assert "10.45.3.99" in " ".join(r.evidence)


@pytest.mark.real
def test_mtu_real_processes_all_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry) -> None:  # noqa: ANN001
    _fake_ping(tmp_path, monkeypatch, {"10.45.3.22": PEERS["10.45.3.22"]})
    results, _ = engine.run(registry, [registry.checks["net.mtu"]], ["node1"], LocalTransport(), profile_name=H100,
                            options=Options(peers=["10.45.3.22"]))
    [r] = results
    assert r.status is Status.PASS, (r.summary, r.evidence)


@pytest.mark.real
def test_nic_real_processes_through_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry) -> None:  # noqa: ANN001
    _fake_ping(tmp_path, monkeypatch, {})
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=ens9f0np0")
    results, _ = engine.run(registry, [registry.checks["net.nic"]], ["node1"], LocalTransport(), profile_name=H100)
    [r] = results
    assert r.status is Status.PASS, (r.summary, r.evidence)
    assert r.facts["env"]["NCCL_SOCKET_IFNAME"] == "=ens9f0np0"


def test_nic_env_without_interfaces_is_skip() -> None:
    [r] = grade("net.nic", {"env": capture("env", fixture_text("ip/env_job_bad.txt"))}, profile=H100, mode="analyze")
    assert r.status is Status.SKIP


def test_analyze_node_folder_grades_nic_and_mtu(tmp_path: Path, registry) -> None:  # noqa: ANN001
    from preflight.analyze import analyze

    node = tmp_path / "gpu-c031"
    node.mkdir()
    for name in ("ip/ip_j_d_addr_data_mtu1500.json", "ip/env_job_ok.txt", "ip/speed_h100.txt",
                 "ping/transcript_black_hole_pair.txt"):
        (node / Path(name).name).write_text(fixture_text(name))
    res = {r.check: r for r in analyze(registry, [node], profile_name=H100)}
    assert res["net.nic"].status is Status.FAIL and res["net.nic"].node == "gpu-c031"
    assert res["net.mtu"].facts["outcome"] == "silent_loss"

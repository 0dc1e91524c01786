"""Link flaps and transceiver faults (checks/flaps.py over preflight/parsers/netlog.py), for net.nic and ib.hca."""

from __future__ import annotations

import pytest

from preflight.checks import flaps
from preflight.findings import Findings
from preflight.framing import frame
from preflight.model import Status
from preflight.parsers import netlog
from preflight.profile import load as load_profile
from tests.conftest import fixture_text, grade_text


def events(text: str) -> netlog.LinkEvents:
    return netlog.parse(frame(text).docs[0])


def test_is_ib_name():
    for name in ("ib0", "ib12", "ibp26s0", "ibs85f0"):
        assert flaps.is_ib_name(name), name
    for name in ("ib", "ibx0", "eth0", "ens6f0np0", "bond0", "0000:17:00.0"):
        assert not flaps.is_ib_name(name), name


# ----------------------------------------------------------------------------- parser


def test_module_errors_are_read_and_mapped_to_their_netdev():
    ev = events(fixture_text("netlog/dmesg_mlx5_module_error_and_flaps.log"))
    assert [(e.iface, e.up) for e in ev.events] == [
        ("ens21f0np0", False), ("ens21f0np0", True), ("ens21f0np0", False), ("ibp193s0", True), ("ibp193s0", False),
        ("ibp193s0", True)]
    assert [(m.pci, m.module, m.what) for m in ev.module_errors] == [
        ("0000:b8:00.0", 0, "Cable error, High Temperature"), ("0000:c1:00.0", 0, "Cable error, Power budget exceeded")]
    assert ev.pci_netdev == {"0000:b8:00.0": "ens21f0np0"}
    assert ev.module_devices() == ["ens21f0np0", "0000:c1:00.0"]
    assert [m.what for m in ev.modules_of("ens21f0np0")] == ["Cable error, High Temperature"]
    assert ev.modules_of("eth9") == [] and ev.device(ev.module_errors[1]) == "0000:c1:00.0"
    assert ev.module_errors[0].line.mono == 1630.5501
    assert netlog.detect(frame(fixture_text("netlog/dmesg_mlx5_module_error_and_flaps.log")).docs[0])


def test_a_module_error_alone_is_detected_and_plug_events_are_not_link_events():
    one = ("[ 1630.550100] mlx5_core 0000:b8:00.0: mlx5_port_module_event:1166:(pid 0): Port module event[error]: "
           "module 1, Cable error, Bad or shorted cable/module\n")
    assert netlog.detect(frame(one).docs[0])
    plugged = "[ 10.0] mlx5_core 0000:b8:00.0: mlx5_port_module_event:1158:(pid 0): Port module event: module 0, " \
              "Cable plugged\n"
    assert not netlog.detect(frame(plugged * 3).docs[0])
    ev = events(plugged * 3)
    assert ev.events == [] and ev.module_errors == []


def test_index_is_built_once_and_reads_each_event_once():
    lines = [f"[{i}.0] mlx5_core 0000:17:00.{i % 4} ens{i % 50}f0np0: Link {'up' if i % 100 >= 50 else 'down'}"
             for i in range(5000)]
    ev = events("\n".join(lines) + "\n")

    class Counting(list):
        iterations = 0

        def __iter__(self):
            Counting.iterations += 1
            return super().__iter__()

    ev.events = Counting(ev.events)
    ev._by = None
    names = ev.interfaces()
    f = Findings()
    out = flaps.grade_flaps(ev, names, load_profile("generic"), f, "link")
    assert len(names) == 50 and len(out) == 50
    assert Counting.iterations == 1  # one pass builds the index; every interface reads its own events
    assert ev.flaps("ens0f0np0") == 50 and ev.window("ens0f0np0") == ("0.0", "4950.0")


def test_window_and_last_up():
    ev = events(fixture_text("netlog/journal_networkd_ib0_flapping_then_up.log"))
    assert ev.last_up("ib0") is True and ev.last_up("nope") is None
    assert ev.of("nope") == [] and ev.downs("nope") == [] and ev.flaps("nope") == 0
    first, last = ev.window("ib0")
    assert first and last and first != last


@pytest.mark.parametrize("line,iface,up", [
    ("systemd-networkd[812]: ib6: Lost carrier", "ib6", False),
    ("systemd-networkd[812]: ib6: Gained carrier", "ib6", True),
    ("NetworkManager[901]: <info>  device (ens3): carrier: link connected", "ens3", True),
    ("NetworkManager[901]: <info>  device (ens3): carrier: link disconnected", "ens3", False),
    ("ixgbe 0000:03:00.0 eno1: NIC Link is Down", "eno1", False),
    ("ixgbe 0000:03:00.0 eno1: NIC Link is Up 10 Gbps, Flow Control: RX/TX", "eno1", True),
    ("bnxt_en 0000:41:00.0 ens2f0np0: NIC Link is Up, 200000 Mbps full duplex", "ens2f0np0", True),
    ("mlx5_core 0000:17:00.0 ens6f0np0: Link down", "ens6f0np0", False),
    ("IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready", "ib0", True),
])
def test_each_message(line, iface, up):
    ev = events(f"Mar 02 11:41:10 gpu-c114 kernel: {line}\n")
    assert [(e.iface, e.up) for e in ev.events] == [(iface, up)]


def test_not_an_interface():
    assert events("kernel: the: Link down\nkernel: port: link up\n").events == []
    assert events("nothing here\n").events == []


def test_pci_of_the_netdev_is_kept_lower_case():
    ev = events("[1.0] mlx5_core 0000:B8:00.1 ens21f1np1: Link up\n")
    assert ev.pci_netdev == {"0000:b8:00.1": "ens21f1np1"}


def test_json_records_are_peeled():
    text = '{"MESSAGE": "ib0: Lost carrier", "_HOSTNAME": "n1", "SYSLOG_IDENTIFIER": "systemd-networkd"}\n' * 2
    ev = events(text)
    assert [(e.iface, e.up) for e in ev.events] in ([("ib0", False), ("ib0", False)], [])


# ----------------------------------------------------------------------------- grading


def test_grade_flaps_codes_follow_the_calling_check():
    ev = events(fixture_text("netlog/dmesg_mlx5_module_error_and_flaps.log"))
    prof = load_profile("generic")
    f = Findings()
    out = flaps.grade_flaps(ev, ["ens21f0np0"], prof, f, "link")
    assert out == [{"interface": "ens21f0np0", "flaps": 1, "down_now": True, "downs": 2}]
    assert f.codes() == ["net.nic/link-lost", "net.nic/module-error"]
    f = Findings()
    out = flaps.grade_flaps(ev, ["ibp193s0", "0000:c1:00.0"], prof, f, "IB port", check="ib.hca")
    assert out == [{"interface": "ibp193s0", "flaps": 1, "down_now": False, "downs": 1}]
    assert f.codes() == ["ib.hca/link-flapped", "ib.hca/module-error"]
    assert f.summaries(Status.WARN) == [
        "IB port ibp193s0 flapped 1 time(s) between 1702.100300 and 1703.500400",
        "IB port 0000:c1:00.0: transceiver fault reported by the driver (Cable error, Power budget exceeded)"]


def test_names_without_events_or_findings_do_not_stop_the_others():
    ev = events(fixture_text("netlog/dmesg_mlx5_module_error_and_flaps.log"))
    f = Findings()
    out = flaps.grade_flaps(ev, ["eth7", "ibp193s0"], load_profile("generic"), f, "IB port", check="ib.hca")
    assert [x["interface"] for x in out] == ["ibp193s0"] and f.codes() == ["ib.hca/link-flapped"]
    clean = "[1.0] mlx5_core 0000:17:00.0 ens1: Link up\n[2.0] mlx5_core 0000:17:00.1 ens2: Link down\n"
    f = Findings()
    out = flaps.grade_flaps(events(clean), ["ens1", "ens2"], load_profile("generic"), f, "link")
    assert [x["interface"] for x in out] == ["ens1", "ens2"] and f.codes() == ["net.nic/link-lost"]


def test_one_flap_has_its_window_and_the_profile_source():
    text = "[5.0] mlx5_core 0000:17:00.0 ens1: Link down\n[6.5] mlx5_core 0000:17:00.0 ens1: Link up\n"
    prof = load_profile("generic")
    f = Findings()
    flaps.grade_flaps(events(text), ["ens1"], prof, f, "link")
    assert f.summaries(Status.WARN) == ["link ens1 flapped 1 time(s) between 5.0 and 6.5"]
    assert f.items[0].evidence[-1] == f"net.link_flaps_fail = 3 ({prof.source('net.link_flaps_fail')})"
    assert prof.source("net.link_flaps_fail")


def test_module_faults_of_one_device_are_named_together():
    text = "".join(f"[{i}.0] mlx5_core 0000:c1:00.0: mlx5_port_module_event:1166:(pid 0): Port module event[error]: "
                   f"module 0, Cable error, {what}\n" for i, what in enumerate(("Power budget exceeded",
                                                                                 "High Temperature")))
    f = Findings()
    flaps.grade_flaps(events(text), ["0000:c1:00.0"], load_profile("generic"), f, "IB port", check="ib.hca")
    assert f.summaries(Status.WARN) == ["IB port 0000:c1:00.0: transceiver fault reported by the driver (Cable error, "
                                        "High Temperature; Cable error, Power budget exceeded)"]
    assert f.items[0].remedy.startswith("the port module (cable/transceiver) of 0000:c1:00.0 reported Cable error, "
                                        "High Temperature, Cable error, Power budget exceeded: reseat")
    assert len(f.items[0].evidence) == 2


def test_flapping_past_the_profile_count_fails():
    lines = []
    for i in range(3):
        lines += [f"Mar 02 11:41:{10 + 2 * i:02d} n1 systemd-networkd[7]: ib3: Lost carrier",
                  f"Mar 02 11:41:{11 + 2 * i:02d} n1 systemd-networkd[7]: ib3: Gained carrier"]
    f = Findings()
    out = flaps.grade_flaps(events("\n".join(lines) + "\n"), ["ib3"], load_profile("generic"), f, "IB port", "ib.hca")
    assert out == [{"interface": "ib3", "flaps": 3, "down_now": False, "downs": 3}]
    assert f.codes() == ["ib.hca/link-flapping"]
    assert f.summaries(Status.FAIL) == ["IB port ib3 flapped 3 times between Mar 02 11:41:10 and Mar 02 11:41:15"]
    assert f.items[0].evidence[-1].startswith("net.link_flaps_fail = 3 (")
    f = Findings()
    flaps.grade_flaps(events("\n".join(lines[:4]) + "\n"), ["ib3"], load_profile("generic"), f, "IB port", "ib.hca")
    assert f.codes() == ["ib.hca/link-flapped"]


def test_link_lost_has_no_window_and_quotes_at_most_six_lines():
    lines = [f"[{i}.0] mlx5_core 0000:17:00.0 ens6f0np0: Link {'down' if i % 2 == 0 else 'up'}" for i in range(9)]
    f = Findings()
    flaps.grade_flaps(events("\n".join(lines) + "\n"), ["ens6f0np0"], load_profile("generic"), f, "link")
    assert f.summaries(Status.FAIL) == ["link ens6f0np0 lost its link and did not get it back"]
    assert len(f.items[0].evidence) == 7 and f.items[0].evidence[0] == lines[-1]  # the event that left it down


def test_no_flap_threshold_in_a_profile(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[net]\nlink_flaps_fail = { value = 0, source = "t" }\n')
    lines = [f"[{i}.0] mlx5_core 0000:17:00.0 ens6f0np0: Link {'down' if i % 2 == 0 else 'up'}" for i in range(20)]
    f = Findings()
    flaps.grade_flaps(events("\n".join(lines) + "\n"), ["ens6f0np0"], load_profile(str(prof)), f, "link")
    assert f.codes() == ["net.nic/link-flapped"]


def test_clean_link_gives_a_fact_and_no_finding():
    f = Findings()
    out = flaps.grade_flaps(events("[1.0] mlx5_core 0000:17:00.0 ens6f0np0: Link up\n"), ["ens6f0np0"],
                            load_profile("generic"), f, "link")
    assert out == [{"interface": "ens6f0np0", "flaps": 0, "down_now": False, "downs": 0}] and not f


def test_ib_hca_grades_module_faults_of_functions_without_an_ethernet_netdev():
    [r] = grade_text("ib.hca", {"link-events": fixture_text("netlog/dmesg_mlx5_module_error_and_flaps.log")})
    assert r.status is Status.WARN
    assert r.facts["codes"] == ["ib.hca/link-flapped", "ib.hca/module-error"]
    assert [x["interface"] for x in r.facts["flaps"]] == ["ibp193s0"]
    assert r.summary.startswith("IB port ibp193s0 flapped 1 time(s)")


def test_ib_hca_module_fault_alone():
    text = ("[ 1702.000021] mlx5_core 0000:c1:00.0: mlx5_port_module_event:1166:(pid 0): Port module event[error]: "
            "module 0, Cable error, High Temperature\n")
    [r] = grade_text("ib.hca", {"link-events": text})
    assert r.status is Status.WARN and r.facts["codes"] == ["ib.hca/module-error"] and r.facts["flaps"] == []
    assert "mlxlink -d 0000:c1:00.0 -m" in r.remedy


def test_ib_hca_without_ib_events_skips():
    [r] = grade_text("ib.hca", {"link-events": "[1.0] mlx5_core 0000:17:00.0 ens6f0np0: Link up\n" * 2})
    assert r.status is Status.SKIP and r.facts["codes"] == ["ib.hca/no-input"]


def test_net_nic_flap_codes():
    [r] = grade_text("net.nic", {"link-events": fixture_text("netlog/dmesg_mlx5_link_down_stays_down.log")})
    assert r.status is Status.FAIL and "net.nic/link-lost" in r.facts["codes"]


@pytest.mark.parametrize("check", ["net.nic", "ib.hca"])
@pytest.mark.parametrize("events_text,kind", [
    ("[1.0] mlx5_core 0000:17:00.0 ibp1s0: Link down\n", "link-lost"),
    ("".join(f"[{i}.0] mlx5_core 0000:17:00.0 ibp1s0: Link {'down' if i % 2 == 0 else 'up'}\n" for i in range(6)),
     "link-flapping"),
    ("[1.0] mlx5_core 0000:17:00.0 ibp1s0: Link down\n[2.0] mlx5_core 0000:17:00.0 ibp1s0: Link up\n", "link-flapped"),
    ("[1.0] mlx5_core 0000:17:00.0 ibp1s0: Link up\n[2.0] mlx5_core 0000:17:00.0: mlx5_port_module_event:1166:(pid 0): "
     "Port module event[error]: module 0, Cable error, High Temperature\n", "module-error"),
])
def test_every_code_of_each_calling_check(check, events_text, kind):
    f = Findings()
    flaps.grade_flaps(events(events_text), ["ibp1s0"], load_profile("generic"), f, "port", check=check)
    assert f.codes() == [f"{check}/{kind}"]
    assert flaps.CODES[check][kind.replace("link-", "").replace("-error", "")] == f"{check}/{kind}"

"""ib.hca: ibstat / ibstatus / ibv_devinfo parsing and compute-port grading."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.checks import infiniband as ib
from preflight.framing import Doc, frame
from preflight.model import Status
from preflight.parsers import ib as ibp
from preflight.probes import run_probe
from tests.conftest import FIXTURES, capture, fixture_text, grade
from tests.fakes import install, scenario


def one(text: str, profile: str = "generic", rc: int = 0, stderr: str = "", argv: list[str] | None = None):
    res = grade("ib.hca", {"ibstat": capture("ibstat", text, rc=rc, stderr=stderr, argv=argv or ["ibstat"])},
                profile=profile)
    assert len(res) == 1
    return res[0]


# --------------------------------------------------------------------------------------------
# parser


def parse(text: str) -> ibp.IbReport:
    return ibp.parse(frame(text).docs[0]) if text.strip() else ibp.IbReport()



def test_parse_ibstat_tabs():
    rep = parse(fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"))
    assert rep.kind == "ibstat" and len(rep.ports) == 10 and not rep.errors
    p = rep.ports[0]
    assert p.fact() == {"ca": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate": 400,
                        "link_layer": "InfiniBand", "ca_type": "MT4129", "firmware": "28.41.1000", "lid": 101,
                        "sm_lid": 7}
    assert rep.ports[4].link_layer == "Ethernet" and rep.ports[4].rate == 100


def test_parse_ibstat_spaces_and_bond_name():
    rep = parse(fixture_text("ib/ibstat_spaces_bond_one_initializing.txt"))
    assert [p.ca for p in rep.ports][-1] == "mlx5_bond_0"
    assert rep.ports[-1].ca_type == "MT41692" and rep.ports[-1].rate == 200
    assert rep.ports[6].state == "Initializing" and rep.ports[6].physical_state == "LinkUp"


def test_parse_ibstatus():
    rep = parse(fixture_text("ib/ibstatus_hdr_mlx5_1_polling.txt"))
    assert rep.kind == "ibstatus"
    assert [(p.ca, p.state, p.physical_state, p.rate, p.link_layer) for p in rep.ports[:2]] == [
        ("mlx5_0", "Active", "LinkUp", 200.0, "InfiniBand"), ("mlx5_1", "Down", "Polling", 10.0, "InfiniBand")]


def test_parse_ibv_devinfo_verbose_rate_from_width_and_speed():
    rep = parse(fixture_text("ib/ibv_devinfo_v_mlx5_1_disabled.txt"))
    assert rep.kind == "ibv_devinfo"
    a, b = rep.ports
    assert (a.ca, a.ca_type, a.state, a.physical_state, a.rate) == ("mlx5_0", "MT4129", "Active", "LinkUp", 400.0)
    assert (b.state, b.physical_state) == ("Down", "Disabled")


def test_parse_ibv_devinfo_plain_has_no_phys_state():
    text = ("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tvendor_part_id:\t\t\t4129\n"
            "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tInfiniBand\n")
    rep = parse(text)
    assert rep.ports[0].up and rep.ports[0].physical_state == "" and rep.ports[0].rate is None


def test_parse_ibpanic_keeps_cas():
    rep = parse(fixture_text("ib/ibstat_ibpanic_mlx5_6.txt"))
    assert len(rep.ports) == 6 and rep.missing_devices == ["mlx5_6"]
    assert rep.errors[0].startswith("ibpanic:")


@pytest.mark.parametrize("text", ["", "garbage\n\n\x00", "CA 'x'\n", "Port 1:\n\tState: Active\n"])
def test_parse_never_raises(text):
    parse(text)


# --------------------------------------------------------------------------------------------
# detectors


def test_detectors():
    def det(rel: str) -> bool:
        return ibp.detect(frame(fixture_text(rel)).docs[0])

    assert det("ib/ibstat_spaces_bond_one_initializing.txt")
    assert det("ib/ibstatus_hdr_mlx5_1_polling.txt")
    assert det("ib/ibv_devinfo_v_mlx5_1_disabled.txt")
    assert not det("kernel-log/dmesg_T_xid79_fallen_off_bus.log")
    assert not det("ib/garbage.txt")


# --------------------------------------------------------------------------------------------
# compute ports


def test_compute_ports_prefer_infiniband_and_fast_adapters():
    rep = parse(fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"))
    assert len(ib.compute_ports(rep.ports, "any", 0)) == 8
    assert len(ib.compute_ports(rep.ports, "Ethernet", 0)) == 2
    roce = parse(fixture_text("ib/ibstat_roce_mlx5_3_polling.txt"))
    names = [p.ca for p in ib.compute_ports(roce.ports, "any", 0)]
    assert len(names) == 8 and "mlx5_3" in names and "mlx5_9" not in names


# --------------------------------------------------------------------------------------------
# grading


@pytest.mark.parametrize("profile", ["generic", "h100-sxm-8x"])
def test_all_active_passes(profile):
    r = one(fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"), profile=profile)
    assert r.status is Status.PASS, r.summary
    assert "8/8" in r.summary
    assert len(r.facts["ports"]) == 10 and set(r.facts["ports"][0]) >= {"ca", "port", "state", "physical_state",
                                                                        "rate", "link_layer"}


@pytest.mark.parametrize("profile", ["generic", "h100-sxm-8x"])
def test_roce_polling_compute_port_fails(profile):
    r = one(fixture_text("ib/ibstat_roce_mlx5_3_polling.txt"), profile=profile)
    assert r.status is Status.FAIL
    assert "mlx5_3 Down/Polling" in r.summary
    assert "sees no peer" in r.remedy and "cable" in r.remedy
    assert any("Polling" in e and "mlx5_3" in e for e in r.evidence)
    assert "mlx5_9" in r.remedy  # the front-end port is reported too, as not affecting compute
    if profile == "h100-sxm-8x":
        assert "only 7 of 8 compute NICs up" in r.summary


def test_initializing_port_points_at_subnet_manager():
    r = one(fixture_text("ib/ibstat_spaces_bond_one_initializing.txt"))
    assert r.status is Status.FAIL and "subnet manager" in r.remedy


def test_ibpanic_rc255_fails_quoting_error_and_keeps_cas():
    r = one(fixture_text("ib/ibstat_ibpanic_mlx5_6.txt"), rc=255)
    assert r.status is Status.FAIL
    assert "ibpanic" in r.summary and "mlx5_6" in r.summary
    assert len(r.facts["ports"]) == 6 and r.facts["missing_devices"] == ["mlx5_6"]
    assert any(e.startswith("ibpanic") for e in r.evidence)


def test_nonzero_rc_without_error_line_still_fails():
    r = one(fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"), rc=1, stderr="ibwarn: something went wrong\n")
    assert r.status is Status.FAIL


def test_rate_below_profile_fails_and_sibling_rate_warns_on_generic():
    text = fixture_text("ib/ibstat_mlx5_2_at_200.txt")
    r = one(text, profile="h100-sxm-8x")
    assert r.status is Status.FAIL and "mlx5_2 at 200" in r.summary
    assert any(e.startswith("ib.rate = 400") for e in r.evidence)
    r = one(text)  # a ConnectX-7 (MT4129) at 200: below what the adapter can, may be by design
    assert r.status is Status.WARN and "mlx5_2 (MT4129) at 200 of 400" in r.summary
    assert r.facts["codes"] == ["ib.hca/rate-below-adapter"]
    r = one(text.replace("MT4129", "MT9999"))  # a model without a nominal rate: compared with its siblings
    assert r.status is Status.WARN and "slower than their siblings" in r.summary
    assert r.facts["codes"] == ["ib.hca/rate-below-siblings"]


def test_ibstatus_polling_fails():
    r = one(fixture_text("ib/ibstatus_hdr_mlx5_1_polling.txt"), argv=["ibstatus"])
    assert r.status is Status.FAIL and "mlx5_1" in r.summary
    assert r.facts["format"] == "ibstatus"


def test_ibv_devinfo_disabled_fails():
    r = one(fixture_text("ib/ibv_devinfo_v_mlx5_1_disabled.txt"), argv=["ibv_devinfo", "-v"])
    assert r.status is Status.FAIL and "Disabled" in r.remedy


def test_h100_expects_eight():
    blocks = fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt").split("CA '")[1:]
    text = "".join("CA '" + b for b in blocks[:6])  # mlx5_0..mlx5_5: 5 IB compute ports + 1 Ethernet
    r = one(text, profile="h100-sxm-8x")
    assert r.status is Status.FAIL and "of 8 compute NICs up" in r.summary
    assert any("ib.hca_count = 8" in e for e in r.evidence)


def test_require_all_ports_turns_front_end_down_into_fail(tmp_path: Path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[ib]\n'
                    'require_all_ports = { value = true, source = "storage on RoCE" }\n')
    text = fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt").replace(
        "State: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 100", "State: Down\n\t\tPhysical state: Disabled\n\t\tRate: 40", 1)
    assert one(text).status is Status.WARN
    assert one(text, profile=str(prof)).status is Status.FAIL


def test_infiniband_profile_without_ib_ports(tmp_path: Path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[ib]\n'
                    'link_layer = { value = "InfiniBand", source = "IB fabric" }\n')
    r = one(fixture_text("ib/ibstat_roce_mlx5_3_polling.txt"), profile=str(prof))
    assert r.status is Status.FAIL and "no InfiniBand port" in r.summary


@pytest.mark.parametrize("text, rc, profile, status", [
    ("", 0, "generic", Status.SKIP),
    ("No IB devices found\n", 255, "generic", Status.SKIP),
    ("No IB devices found\n", 255, "h100-sxm-8x", Status.FAIL),
    ("", 0, "h100-sxm-8x", Status.FAIL),
    ("Segmentation fault (core dumped)\nsomething else\n", 0, "generic", Status.SKIP),  # not recognised
    ("Segmentation fault (core dumped)\n", 139, "generic", Status.FAIL),  # the tool crashed
])
def test_no_ports(text, rc, profile, status):
    r = one(text, rc=rc, profile=profile)
    assert r.status is status
    assert r.summary
    if status is not Status.SKIP:
        assert r.remedy


def test_missing_probe_skips():
    assert grade("ib.hca", {})[0].status is Status.SKIP


def test_probe_falls_back_to_ibv_devinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bin_dir = install(tmp_path / "bin", ["ibstat", "ibv_devinfo"])  # the fake ibstat has no scenario: exit 127
    scen = scenario(tmp_path / "scen", {"ibv_devinfo": [{"match": "-v", "stdout": "d.txt"}]},
                    {"d.txt": FIXTURES / "ib" / "ibv_devinfo_v_mlx5_1_disabled.txt"})
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("PREFLIGHT_FAKE_DIR", str(scen))
    cap = run_probe(ib.PROBE)
    assert cap.argv == ["ibv_devinfo", "-v"] and cap.rc == 0
    assert grade("ib.hca", {"ibstat": cap})[0].status is Status.FAIL


# --------------------------------------------------------------------------------------------
# every layout and state of the tools (rdma-core: ibstat.c, ibstatus, devinfo.c)


def test_parse_ibstat_one_port_form():
    """`ibstat mlx5_3 1`: "CA: '<name>'" and the port's lines without indentation."""
    rep = parse(fixture_text("ib/ibstat_one_port_mlx5_3_400.txt"))
    assert rep.kind == "ibstat" and [p.fact() for p in rep.ports] == [
        {"ca": "mlx5_3", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate": 400,
         "link_layer": "InfiniBand", "ca_type": "", "firmware": "", "lid": 77, "sm_lid": 1}]
    assert ibp.detect(frame(fixture_text("ib/ibstat_one_port_mlx5_3_400.txt")).docs[0])


def test_parse_ibstatus_active_defer_hex_lids_and_phy_test():
    rep = parse(fixture_text("ib/ibstatus_active_defer_hex_lid_phy_test.txt"))
    got = [(p.ca, p.state, p.physical_state, p.rate, p.lid, p.sm_lid, p.link_layer) for p in rep.ports]
    assert got == [("mlx5_0", "Active", "LinkUp", 400.0, 0x1A3, 1, "InfiniBand"),
                   ("mlx5_1", "Down", "PhyTest", 10.0, 65535, 0, "InfiniBand"),
                   ("mlx5_2", "Initializing", "LinkUp", 400.0, 0x1A5, 1, "InfiniBand")]
    assert all(p.known for p in rep.ports)


def test_ibstatus_grading_names_no_lid_and_no_subnet_manager():
    r = one(fixture_text("ib/ibstatus_active_defer_hex_lid_phy_test.txt"), argv=["ibstatus"])
    assert r.status is Status.FAIL and r.facts["codes"] == ["ib.hca/compute-port-down"]
    assert "mlx5_1 Down/PhyTest, mlx5_2 Initializing/LinkUp" in r.summary
    assert "mlx5_1 port 1 is PhyTest: the link is not up" in r.remedy
    assert "mlx5_2 port 1 has link but is Initializing: no subnet manager" in r.remedy


@pytest.mark.parametrize("value,state", [
    ("PORT_ACTIVE (4)", "Active"), ("PORT_ACTIVE_DEFER (5)", "Active"), ("PORT_DOWN (1)", "Down"),
    ("PORT_INIT (2)", "Initializing"), ("PORT_ARMED (3)", "Armed"), ("4: ACTIVE", "Active"),
    ("5: ACTIVE_DEFER", "Active"), ("2: INIT", "Initializing"), ("3: ARMED", "Armed"), ("1: DOWN", "Down"),
    ("Active", "Active"), ("Initializing", "Initializing"), ("Armed", "Armed"), ("Down", "Down"),
    ("invalid state (7)", "invalid state"), ("???", "???"),
])
def test_port_states(value, state):
    text = f"hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\t\t{value}\n\t\t\tlink_layer:\t\tInfiniBand\n"
    [p] = parse(text).ports
    assert p.state == state
    assert p.known is (state in ("Active", "Down", "Initializing", "Armed"))


@pytest.mark.parametrize("value,phys", [
    ("LINK_UP (5)", "LinkUp"), ("POLLING (2)", "Polling"), ("DISABLED (3)", "Disabled"), ("SLEEP (1)", "Sleep"),
    ("PORT_CONFIGURATION TRAINNING (4)", "PortConfigurationTraining"), ("LINK_ERROR_RECOVERY (6)", "LinkErrorRecovery"),
    ("PHY TEST (7)", "PhyTest"), ("invalid physical state (9)", "invalid physical state"),
])
def test_ibv_devinfo_physical_states(value, phys):
    text = (f"hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tlink_layer:\t\tInfiniBand\n"
            f"\t\t\tphys_state:\t\t{value}\n")
    [p] = parse(text).ports
    assert p.physical_state == phys and p.known is (phys != "invalid physical state")


@pytest.mark.parametrize("value,phys", [
    ("LinkUp", "LinkUp"), ("Polling", "Polling"), ("Disabled", "Disabled"), ("Sleep", "Sleep"),
    ("PortConfigurationTraining", "PortConfigurationTraining"), ("LinkErrorRecovery", "LinkErrorRecovery"),
    ("PhyTest", "PhyTest"), ("No state change", "NoStateChange"), ("4: PortConfigurationTraining", "PortConfigurationTraining"),
    ("6: LinkErrorRecovery", "LinkErrorRecovery"),
])
def test_ibstat_physical_states(value, phys):
    text = f"CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: {value}\n\t\tRate: 10\n"
    [p] = parse(text).ports
    assert p.physical_state == phys and p.known


def test_switch_and_router_node_types_and_fdr10_rate():
    text = ("Switch 'mlx5_0'\n\tSwitch type: MT54000\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
            "\t\tPhysical state: LinkUp\n\t\tRate: 40 (FDR10)\n\t\tLink layer: InfiniBand\n"
            "Router 'r0'\n\tRouter type: MT4119\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
            "\t\tRate: 2.5\n")
    rep = parse(text)
    assert [(p.ca, p.ca_type, p.rate) for p in rep.ports] == [("mlx5_0", "MT54000", 40.0), ("r0", "MT4119", 2.5)]


def test_ibv_devinfo_mtus_and_lids():
    rep = parse(fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt"))
    assert [(p.ca, p.max_mtu, p.active_mtu, p.lid, p.sm_lid, p.ca_type) for p in rep.ports] == [
        ("mlx5_4", 4096, 1024, 0, 0, "MT4129"), ("mlx5_5", 4096, 2048, 210, 12, "MT4129")]
    assert rep.ports[0].fact()["active_mtu"] == 1024 and "max_mtu" in rep.ports[1].fact()


ROCE_ONLY = fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt").replace("InfiniBand", "Ethernet")


def test_reduced_mtu_warns_per_link_layer():
    # InfiniBand beside an Ethernet port: the IB port is the compute fabric, the other is front-end
    r = one(fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt"), argv=["ibv_devinfo"])
    assert r.status is Status.WARN and r.facts["codes"] == ["ib.hca/mtu-reduced"]
    assert "active MTU below the port's maximum: mlx5_5 2048 of 4096" in r.summary and "mlx5_4" not in r.summary
    assert r.remedy.startswith("mlx5_5: the subnet manager's partition")
    r = one(ROCE_ONLY, argv=["ibv_devinfo"])
    assert "active MTU below the port's maximum: mlx5_4 1024 of 4096, mlx5_5 2048 of 4096" in r.summary
    assert "mlx5_4: RoCE uses the largest IB MTU that fits the netdev's MTU" in r.remedy


def test_a_front_end_ports_mtu_is_not_graded():
    text = fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt").replace("2048 (4)", "4096 (5)")
    r = one(text, argv=["ibv_devinfo"])
    assert "codes" not in r.facts and r.status is Status.PASS and "1 other port(s) Active" in r.summary


def test_unknown_port_state_is_not_recognised_not_down():
    r = one(fixture_text("ib/ibstat_unknown_states.txt"))
    assert r.status is Status.SKIP and r.facts["codes"] == ["ib.hca/port-state-unknown"]
    assert r.summary.startswith("not recognised: mlx5_1 port 1 state ???/???")
    r = one(fixture_text("ib/ibstat_unknown_states.txt"), profile="h100-sxm-8x")
    assert "ib.hca/compute-port-down" not in r.facts["codes"]


def test_unknown_state_counts_as_present_for_the_nic_count(tmp_path: Path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[ib]\nhca_count = { value = 2, source = "t" }\n')
    r = one(fixture_text("ib/ibstat_unknown_states.txt"), profile=str(prof))
    assert r.facts["codes"] == ["ib.hca/port-state-unknown"]
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[ib]\nhca_count = { value = 3, source = "t" }\n')
    r = one(fixture_text("ib/ibstat_unknown_states.txt"), profile=str(prof))
    assert r.facts["codes"] == ["ib.hca/compute-ports-missing", "ib.hca/port-state-unknown"]
    assert "only 1 of 3 compute NICs up" in r.summary


@pytest.mark.parametrize("text,errors,no_devices,no_umad,missing", [
    ("ibpanic: [4021] main: can't init UMAD library: No such file or directory\n", 1, False, True, []),
    ("ibpanic: [4021] main: can't list IB device names: No such file or directory\n", 1, True, False, []),
    ("ibpanic: [4021] main: 'mlx5_9' IB device can't be found: No such file or directory\n", 1, False, False,
     ["mlx5_9"]),
    ("ibwarn: [4021] ca_stat: CA: 'mlx5_0' has no port number 2 - max (1)\n", 1, False, False, []),
    ("No IB devices found\n", 1, True, False, []),
    ("Failed to get IB devices list: Function not implemented\n", 1, True, False, []),
    ("IB device 'mlx5_7' wasn't found\n", 1, False, False, ["mlx5_7"]),
    ("Failed to open device\nFailed to query port 1 props\n", 2, False, False, []),
    ("Fatal error:  No devices\n", 1, True, False, []),
    ("Fatal error:  device 'mlx5_2': sys files not found (/sys/class/infiniband/mlx5_2/ports)\n", 1, False, False,
     ["mlx5_2"]),
    ("0 HCAs found:\n\n", 1, True, False, []),
])
def test_tool_errors(text, errors, no_devices, no_umad, missing):
    rep = parse(text)
    assert (len(rep.errors), rep.no_devices, rep.no_umad, rep.missing_devices) == (errors, no_devices, no_umad,
                                                                                   missing)


@pytest.mark.parametrize("text,command,want", [
    ("ibpanic: [4021] main: can't init UMAD library: No such file or directory\n", "", True),
    ("No IB devices found\n", "", True),
    ("Fatal error:  No devices\n", "ibstatus", True),
    ("Fatal error:  No devices\n", "", False),
    ("Failed to open device\n", "ls", False),
    ("something\nNo IB devices found\n", "", False),
    ("a\nb\nc\nd\n", "ibstat", False),
])
def test_detect_tool_error_only(text, command, want):
    from preflight.framing import Doc
    doc = Doc(text, command=command)
    assert ibp.detect(doc) is want


@pytest.mark.parametrize("text,profile,status,code", [
    ("ibpanic: [4021] main: can't init UMAD library: No such file or directory\n", "h100-sxm-8x", Status.SKIP,
     "ib.hca/umad-unavailable"),
    ("No IB devices found\n", "generic", Status.SKIP, "ib.hca/no-devices-none-expected"),
    ("No IB devices found\n", "h100-sxm-8x", Status.FAIL, "ib.hca/no-devices"),
    ("", "generic", Status.SKIP, "ib.hca/no-devices-none-expected"),
    ("hello\n", "generic", Status.SKIP, "ib.hca/not-recognised"),
])
def test_no_port_codes(text, profile, status, code):
    r = one(text, profile=profile)
    assert r.status is status and r.facts["codes"] == [code]


def test_no_devices_names_the_expectation():
    r = one("No IB devices found\n", rc=255, profile="h100-sxm-8x")
    assert r.summary == "no RDMA ports found (ibstat failed or listed none); profile expects 8"
    assert r.evidence[0] == "No IB devices found" and r.evidence[1].startswith("ib.hca_count = 8")


@pytest.mark.parametrize("fixture,profile,codes", [
    ("ib/ibstat_roce_mlx5_3_polling.txt", "generic", ["ib.hca/compute-port-down", "ib.hca/other-port-down"]),
    ("ib/ibstat_roce_mlx5_3_polling.txt", "h100-sxm-8x",
     ["ib.hca/compute-port-down", "ib.hca/compute-ports-missing", "ib.hca/other-port-down"]),
    ("ib/ibstat_ibpanic_mlx5_6.txt", "generic", ["ib.hca/tool-failed"]),
    ("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt", "generic",
     ["ib.hca/compute-port-down", "ib.hca/pcie-narrow"]),
    ("ib/ibstat_8x400_ib_2fe_all_active.txt", "generic", []),
    ("ib/ibstat_mlx5_2_at_200.txt", "h100-sxm-8x", ["ib.hca/rate-below-profile"]),
])
def test_codes(fixture, profile, codes):
    r = one(fixture_text(fixture), profile=profile)
    assert r.facts.get("codes", []) == codes, r.summary


def test_require_all_ports_code(tmp_path: Path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[ib]\n'
                    'require_all_ports = { value = true, source = "storage on RoCE" }\n')
    r = one(fixture_text("ib/ibstat_roce_mlx5_3_polling.txt"), profile=str(prof))
    assert r.facts["codes"] == ["ib.hca/compute-port-down", "ib.hca/other-port-down-required"]
    assert "(the compute fabric is not affected)" not in r.remedy


def test_adapter_type_unknown_is_a_note():
    text = ("CA 'hfi1_0'\n\tCA type: \n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
            "\t\tRate: 100\n\t\tBase lid: 3\n\t\tLink layer: InfiniBand\n")
    r = one(text)
    assert r.status is Status.PASS and "codes" not in r.facts
    assert "adapter type not reported for hfi1_0 (unknown type, not a port fault)" in r.evidence


def test_rate_below_adapter_needs_a_known_model_and_no_profile_rate():
    text = fixture_text("ib/ibstat_mlx5_2_at_200.txt")
    r = one(text)
    assert r.facts["codes"] == ["ib.hca/rate-below-adapter"]
    assert "ib.ca_type_rates" in " ".join(r.evidence)
    assert one(text.replace("Rate: 200", "Rate: 400")).status is Status.PASS
    # a nominal rate that is not a number is ignored
    from preflight.checks.infiniband import _Expect, _nominal
    p = parse(text).ports[0]
    assert _nominal(_Expect(0, 0, "any", False, {"MT4129": True}), p) is None
    assert _nominal(_Expect(0, 0, "any", False, {"MT4129": "400"}), p) is None
    assert _nominal(_Expect(0, 0, "any", False, {"MT4129": 400}), p) == 400.0


# --------------------------------------------------------------------------------------------
# exact facts of every layout (each field read, each line kept)


@pytest.mark.parametrize("value,state", [
    ("Up", "Active"), ("ACTIVE", "Active"), ("port_active", "Active"), ("PORT_ACTIVE_DEFER", "Active"),
    ("active_defer", "Active"), ("DOWN", "Down"), ("PORT_DOWN", "Down"), ("INIT", "Initializing"),
    ("Initializing", "Initializing"), ("PORT_INIT", "Initializing"), ("ARMED", "Armed"), ("PORT_ARMED", "Armed"),
    ("0: NOP", "NOP"), ("1: DOWN", "Down"),
])
def test_every_state_spelling(value, state):
    assert ibp._norm_state(value, ibp._STATE) == state


@pytest.mark.parametrize("value,phys", [
    ("LinkUp", "LinkUp"), ("LINK_UP", "LinkUp"), ("Disabled", "Disabled"), ("POLLING", "Polling"), ("SLEEP", "Sleep"),
    ("PortConfigurationTraining", "PortConfigurationTraining"), ("PORT_CONFIGURATION_TRAINING", "PortConfigurationTraining"),
    ("PORT_CONFIGURATION TRAINNING", "PortConfigurationTraining"), ("LINK_ERROR_RECOVERY", "LinkErrorRecovery"),
    ("LinkErrorRecovery", "LinkErrorRecovery"), ("Phy Test", "PhyTest"), ("PHY_TEST", "PhyTest"),
    ("PhyTest", "PhyTest"), ("No state change", "NoStateChange"), ("7: Phy Test", "PhyTest"),
])
def test_every_physical_state_spelling(value, phys):
    assert ibp._norm_state(value, ibp._PHYS) == phys


def test_known_states_are_the_tables_values():
    assert ibp.STATES == {"Active", "Down", "Initializing", "Armed"}
    assert ibp.PHYS_STATES == {"LinkUp", "Disabled", "Polling", "Sleep", "PortConfigurationTraining",
                               "LinkErrorRecovery", "PhyTest", "NoStateChange"}
    assert ibp.IbReport().nonblank == 0 and ibp.LID_UNASSIGNED == 0xFFFF


def test_ibstat_port_lines_kept_are_the_graded_ones():
    rep = parse(fixture_text("ib/ibstat_one_port_mlx5_3_400.txt"))
    assert rep.nonblank == 11
    assert rep.ports[0].lines == ["State: Active", "Physical state: LinkUp", "Rate: 400", "Base lid: 77", "SM lid: 1",
                                  "Link layer: InfiniBand"]


def test_ibv_devinfo_ca_values():
    rep = parse(fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt"))
    p = rep.ports[0]
    assert (p.firmware, p.ca_type, p.link_layer) == ("28.42.1000", "MT4129", "Ethernet")
    assert p.lines == ["state:\t\t\tPORT_ACTIVE (4)", "max_mtu:\t\t4096 (5)", "active_mtu:\t\t1024 (3)",
                       "sm_lid:\t\t\t0", "port_lid:\t\t0", "link_layer:\t\tEthernet"]


@pytest.mark.parametrize("width,speed,rate", [
    ("4X (2)", "1.234 Gbps (1)", 4.9), ("", "100.0 Gbps (128)", None), ("1X (1)", "25.0 Gbps (32)", 25.0),
    ("2X (16)", "100.0 Gbps (128)", 200.0), ("invalid width (3)", "25.0 Gbps (32)", None),
    ("4X (2)", "invalid speed (3)", None),
])
def test_ibv_devinfo_rate_from_width_and_speed(width, speed, rate):
    w = f"\t\t\tactive_width:\t\t{width}\n" if width else ""
    text = (f"hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n{w}"
            f"\t\t\tactive_speed:\t\t{speed}\n")
    assert parse(text).ports[0].rate == rate


def test_lid_values():
    assert ibp._int("0x1a3") == 419 and ibp._int(" 65535 ") == 65535 and ibp._int("") is None
    assert ibp._int("unknown") is None and ibp._int("12 (x)") == 12


def test_hca_status_table_facts():
    rep = parse(fixture_text("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt"))
    assert rep.kind == "table"
    assert [p.fact() for p in rep.ports] == [
        {"ca": "mlx5_0", "port": 1, "state": "Active", "physical_state": "", "rate": 400, "link_layer": "InfiniBand",
         "ca_type": "MT4129", "firmware": "", "netdev": "ibp26s0", "pcie_width": 16, "pcie_width_cap": 16},
        {"ca": "mlx5_1", "port": 1, "state": "Down", "physical_state": "", "rate": 10, "link_layer": "InfiniBand",
         "ca_type": "MT4129", "firmware": "", "netdev": "ibp60s0", "pcie_width": 16, "pcie_width_cap": 16},
        {"ca": "mlx5_2", "port": 1, "state": "Initializing", "physical_state": "", "rate": 400,
         "link_layer": "InfiniBand", "ca_type": "MT4129", "firmware": "", "netdev": "ibp77s0", "pcie_width": 8,
         "pcie_width_cap": 16}]
    assert rep.ports[0].lines == ["0000:1a:00.0 | mlx5_0 | ibp26s0 | 0 | active | up | IB | 400 | x16 G5 | x16 G5 | "
                                  "MT4129"]


def test_hca_status_table_variants():
    text = ("| RDMA | State | Link | Rate |\n"
            "| mlx5_0 | active | Ethernet | 200 |\n"
            "| mlx5_1 | down | infiniband |\n"  # a short row
            "| bad name! | active | IB | 100 |\n"  # not a device name
            "| mlx5_2 | active | opa | 100 |\n"
            "no bar line\n"
            "| mlx5_3 | init | infiniband | 400 |\n")
    rep = parse(text)
    assert [(p.ca, p.state, p.link_layer, p.rate, p.pcie_width, p.netdev) for p in rep.ports] == [
        ("mlx5_0", "Active", "Ethernet", 200.0, None, ""), ("mlx5_2", "Active", "opa", 100.0, None, ""),
        ("mlx5_3", "Initializing", "InfiniBand", 400.0, None, "")]
    assert parse("| RDMA | Net |\n| mlx5_0 | ib0 |\n").kind == ""  # no state column: not the table
    assert parse("| Dev | LnkStat |\n| mlx5_0 | active |\n").ports == []


def test_ibdev2netdev_facts():
    rep = parse(fixture_text("ib/ibdev2netdev_mlx5_3_down.txt"))
    assert rep.kind == "ibdev2netdev" and rep.shows_rate is False
    assert [(p.ca, p.port, p.netdev, p.state, p.lines) for p in rep.ports][3:] == [
        ("mlx5_3", 1, "ibp97s0", "Down", ["mlx5_3 port 1 ==> ibp97s0 (Down)"]),
        ("mlx5_4", 1, "ens6f0np0", "Active", ["mlx5_4 port 1 ==> ens6f0np0 (Up)"])]
    assert rep.ports[0].fact()["netdev"] == "ibp26s0"
    mixed = parse("mlx5_0 port 1 ==> ib0 (Up)\n" + fixture_text("ib/ibstat_one_port_mlx5_3_400.txt"))
    assert mixed.kind == "ibdev2netdev" and len(mixed.ports) == 2


def test_ibdev2netdev_grading_has_no_rate():
    r = one(fixture_text("ib/ibdev2netdev_mlx5_3_down.txt"), argv=["ibdev2netdev"])
    assert r.status is Status.FAIL and r.facts["codes"] == ["ib.hca/compute-port-down"]
    assert "rate ?" in r.summary


@pytest.mark.parametrize("text,want", [
    ("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n", False),  # no physical state
    ("CA 'mlx5_0'\n\tPhysical state: LinkUp\n", False),  # no port line
    ("\tPort 1:\n\t\tPhysical state: LinkUp\n", False),  # no CA line
    ("Infiniband device 'mlx5_0' port 1 status:\n\tstate:\t 4: ACTIVE\n", False),
    ("infiniband device 'mlx5_0' port 1 status:\n\tphys state:\t 5: LinkUp\n", False),
    ("\tphys state:\t 5: LinkUp\n", True),  # a headerless fragment (`ibstatus | grep phys`): read for what it shows
    ("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n", False),
    ("\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", False),
    ("mlx5_0 port 1 ==> ib0 (Up)\n", True),
    ("| PCI | RDMA | State |\n", False),
    ("| PCI | Net | LnkStat |\n", False),
    ("PCI RDMA LnkStat\n", False),
    ("| PCI | RDMA | LnkStat |\n", True),
])
def test_detect_each_layout_needs_all_its_marks(text, want):
    from preflight.framing import Doc
    assert ibp.detect(Doc(text)) is want


@pytest.mark.parametrize("lines,want", [(3, True), (4, False)])
def test_detect_error_only_at_most_three_lines(lines, want):
    from preflight.framing import Doc
    assert ibp.detect(Doc("Failed to open device\n" * lines, command="ibv_devinfo")) is want


def test_a_pasted_ibstat_is_graded_by_analyze():
    from tests.conftest import analyze_text
    res = [r for r in analyze_text(fixture_text("ib/ibstat_one_port_mlx5_3_400.txt")) if r.check == "ib.hca"]
    assert [r.status for r in res] == [Status.PASS]


def test_unassigned_lid_is_named_in_the_remedy():
    text = ("hca_id:\tmlx5_0\n\tvendor_part_id:\t\t\t4129\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n"
            "\t\t\tport_lid:\t\t65535\n\t\t\tlink_layer:\t\tInfiniBand\n")
    r = one(text, argv=["ibv_devinfo"])
    assert r.remedy == ("drain node; mlx5_0 port 1 is Down/? (no LID from a subnet manager: 65535): check the cable "
                        "and the switch port")
    r = one(text.replace("65535", "0"), argv=["ibv_devinfo"])
    assert "no LID" not in r.remedy


# --------------------------------------------------------------------------------------------
# exact findings (each message, each joined list, each branch)


def ca_block(name, ca_type, state, phys, rate, layer="InfiniBand"):
    return (f"CA '{name}'\n\tCA type: {ca_type}\n\tPort 1:\n\t\tState: {state}\n\t\tPhysical state: {phys}\n"
            f"\t\tRate: {rate}\n\t\tLink layer: {layer}\n")


THREE = (ca_block("mlx5_0", "MT4129", "Active", "LinkUp", 200) + ca_block("mlx5_1", "MT4129", "Active", "LinkUp", 100)
         + ca_block("mlx5_2", "MT4129", "Active", "LinkUp", 400))


def test_check_registration_and_probe():
    from preflight import registry
    assert registry.load().checks["ib.hca"] is ib.CHECK
    assert ib.CHECK.inputs == ("ibstat", "link-events", "rdma-kernel") and ib.CHECK.required == ("ibstat",)
    assert ib.CHECK.node_local and ib.CHECK.in_run and ib.CHECK.probes == (ib.PROBE,)
    assert set(ib.CHECK.profile_keys) == {"ib.hca_count", "ib.rate", "ib.link_layer", "ib.require_all_ports",
                                          "ib.ca_type_rates", "net.link_flaps_fail"}
    assert ib.PROBE.name == "ibstat" and ib.PROBE.timeout == 10
    assert ib.PROBE.commands == (("ibstat",), ("ibv_devinfo", "-v"))


def test_expectations_default_when_the_profile_has_none():
    class Bare:
        def get(self, key, default=None):
            return default

    assert ib._Expect.of(Bare()) == ib._Expect(0, 0.0, "any", False, {})


def test_two_compute_ports_down_exactly():
    text = (ca_block("mlx5_0", "MT4129", "Down", "Disabled", 40) + ca_block("mlx5_1", "MT4129", "Down", "Polling", 10)
            + ca_block("mlx5_2", "MT4129", "Active", "LinkUp", 400))
    r = one(text)
    assert r.summary == ("compute port(s) down: mlx5_0 Down/Disabled, mlx5_1 Down/Polling [1/3 compute ports Active "
                         "(InfiniBand, rate 400)]")
    assert r.remedy == (
        "drain node; mlx5_0 port 1 is Disabled: administratively down or faulted: check `mlxlink -d mlx5_0` and the "
        "switch port; re-enable (ibportstate / ip link set up) or replace the HCA/cable; mlx5_1 port 1 is Polling: the "
        "port is trying to train but sees no peer (cable, transceiver or switch side): reseat/replace the cable or "
        "transceiver, check the switch port")


def test_below_adapter_exactly():
    r = one(THREE)
    assert r.summary == ("3/3 compute ports Active (InfiniBand, rate 100/200/400); compute port(s) below their "
                         "adapter's rate: mlx5_0 (MT4129) at 200 of 400, mlx5_1 (MT4129) at 100 of 400")
    assert r.remedy == (
        "mlx5_0 runs below what a MT4129 can: if the fabric is 200G by design set ib.rate in the site profile; else "
        "check the cable/transceiver and `mlxlink -d mlx5_0`; mlx5_1 runs below what a MT4129 can: if the fabric is "
        "100G by design set ib.rate in the site profile; else check the cable/transceiver and `mlxlink -d mlx5_1`")
    assert r.evidence[-1].startswith("ib.ca_type_rates (NVIDIA/Mellanox product briefs")


def test_below_profile_exactly():
    r = one(THREE, profile="h100-sxm-8x")
    assert r.summary == ("only 3 of 8 compute NICs up; 2 compute port(s) below the expected rate 400: mlx5_0 at 200; "
                         "mlx5_1 at 100 [3/3 compute ports Active (InfiniBand, rate 100/200/400)]")
    assert r.remedy.endswith(
        "(2) mlx5_0 trained at 200 Gb/s: reseat/replace the cable or transceiver, check `mlxlink -d mlx5_0` for the "
        "negotiated speed/width; mlx5_1 trained at 100 Gb/s: reseat/replace the cable or transceiver, check `mlxlink "
        "-d mlx5_1` for the negotiated speed/width")
    assert "ib.rate = 400 (NDR InfiniBand 4X = 400 Gb/s (ibstat Rate: 400))" in r.evidence
    assert "ib.hca_count = 8 (DGX H100: 8 x ConnectX-7 single-port 400G compute NICs)" in r.evidence


def test_below_siblings_exactly():
    r = one(THREE.replace("MT4129", "MT9999"))
    assert r.summary == ("3/3 compute ports Active (InfiniBand, rate 100/200/400); compute port(s) slower than their "
                         "siblings: mlx5_0 at 200 (others 400), mlx5_1 at 100 (others 400)")
    assert r.remedy == (
        "mlx5_0 trained below its siblings: reseat/replace the cable or transceiver, check `mlxlink -d mlx5_0`; set "
        "ib.rate in the site profile to make this a FAIL; mlx5_1 trained below its siblings: reseat/replace the cable "
        "or transceiver, check `mlxlink -d mlx5_1`; set ib.rate in the site profile to make this a FAIL")


def test_siblings_ignore_ports_without_a_rate_and_other_models():
    text = (ca_block("mlx5_0", "MT9999", "Active", "LinkUp", 400) + ca_block("mlx5_1", "MT8888", "Active", "LinkUp", 100)
            + "CA 'mlx5_2'\n\tCA type: MT9999\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
              "\t\tLink layer: InfiniBand\n")
    r = one(text)
    assert "codes" not in r.facts, r.summary


def test_mtu_exactly_and_equal_mtu_is_fine():
    r = one(fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt"), argv=["ibv_devinfo"])
    assert r.remedy == ("mlx5_5: the subnet manager's partition (or the switch port) limits the MTU: check the "
                        "partition's mtu in the SM configuration")
    assert one(ROCE_ONLY, argv=["ibv_devinfo"]).remedy == (
        "mlx5_4: RoCE uses the largest IB MTU that fits the netdev's MTU: set the interface MTU to 4200 (or 9000) to get "
        "4096; mlx5_5: RoCE uses the largest IB MTU that fits the netdev's MTU: set the interface MTU to 4200 (or 9000) "
        "to get 4096")
    same = fixture_text("ib/ibv_devinfo_roce_active_mtu1024.txt").replace("1024 (3)", "4096 (5)").replace("2048 (4)",
                                                                                                         "4096 (5)")
    assert "codes" not in one(same, argv=["ibv_devinfo"]).facts


def test_table_findings_exactly():
    r = one(fixture_text("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt"))
    assert r.summary == ("compute port(s) down: mlx5_1 Down, mlx5_2 Initializing; HCA PCIe link trained narrower than "
                         "it can: mlx5_2 x8 of x16 [1/3 compute ports Active (InfiniBand, rate 400)]")
    assert r.remedy.endswith("(2) reseat the HCA (or its riser), check the slot in the BIOS; `lspci -vv` LnkSta shows "
                             "the trained width")
    two = fixture_text("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt").replace("x16 G5    |  MT4129\n0000:3c",
                                                                                "x4 G5     |  MT4129\n0000:3c")
    assert "mlx5_0 x4 of x16, mlx5_2 x8 of x16" in one(two).summary


def test_front_end_down_exactly():
    r = one(fixture_text("ib/ibstat_roce_mlx5_3_polling.txt"))
    assert r.remedy.endswith(
        "(2) front-end/storage port(s) down: mlx5_9 port 1 is Disabled: administratively down or faulted: check "
        "`mlxlink -d mlx5_9` and the switch port; re-enable (ibportstate / ip link set up) or replace the HCA/cable "
        "(the compute fabric is not affected)")
    text = fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt").replace(
        "State: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 100", "State: Down\n\t\tPhysical state: Disabled\n"
        "\t\tRate: 40")
    r = one(text)
    assert r.summary == ("8/8 compute ports Active (InfiniBand, rate 400); non-compute port(s) down: mlx5_4 (Ethernet "
                         "Down/Disabled), mlx5_9 (Ethernet Down/Disabled)")


def test_port_lines():
    assert ib._port_line(ibp.Port(ca="mlx5_9", port=2)) == \
        "mlx5_9 port 2: State: ?, Physical state: ?, Rate: ?, Link layer: ?"
    p = ibp.Port(ca="mlx5_9", port=2, state="Active", physical_state="LinkUp", rate=400.0, link_layer="InfiniBand",
                 ca_type="MT4129")
    assert ib._port_line(p) == ("mlx5_9 port 2: State: Active, Physical state: LinkUp, Rate: 400, Link layer: "
                                "InfiniBand, CA type: MT4129")
    rep = parse(fixture_text("ib/ibstatus_hdr_mlx5_1_polling.txt"))
    assert ib._port_line(rep.ports[1]) == ("mlx5_1 port 1: base lid: 0x0 | sm lid: 0x3 | state: 1: DOWN | phys "
                                           "state: 2: Polling | rate: 10 Gb/sec (4X SDR) | link_layer: InfiniBand")


@pytest.mark.parametrize("state,phys,want", [
    ("Armed", "LinkUp", "m port 1 has link but is Armed: no subnet manager has configured it: check the subnet "
                        "manager (sminfo) and the switch partition"),
    ("Initializing", "", "m port 1 has link but is Initializing: no subnet manager has configured it: check the "
                         "subnet manager (sminfo) and the switch partition"),
    ("Down", "Sleep", "m port 1 is Sleep: the link is not up: reseat/replace the cable, check `mlxlink -d m`"),
    ("Down", "PortConfigurationTraining", "m port 1 is PortConfigurationTraining: the link is not up: reseat/replace "
                                          "the cable, check `mlxlink -d m`"),
    ("Down", "LinkErrorRecovery", "m port 1 is LinkErrorRecovery: the link is not up: reseat/replace the cable, check "
                                  "`mlxlink -d m`"),
    ("Down", "PhyTest", "m port 1 is PhyTest: the link is not up: reseat/replace the cable, check `mlxlink -d m`"),
    ("", "", "m port 1 is not Active/?: check the cable and the switch port"),
    ("Initializing", "Polling", "m port 1 is Polling: the port is trying to train but sees no peer (cable, "
                                "transceiver or switch side): reseat/replace the cable or transceiver, check the "
                                "switch port"),
])
def test_why_down(state, phys, want):
    assert ib._why_down(ibp.Port(ca="m", port=1, state=state, physical_state=phys)) == want


def test_compute_ports_of_a_model_all_down_use_its_nominal_rate():
    down = [ibp.Port(ca=f"mlx5_{i}", port=1, state="Down", physical_state="Disabled", rate=10.0,
                     link_layer="Ethernet", ca_type="MT4129") for i in range(8)]
    fe = [ibp.Port(ca=f"mlx5_{i}", port=1, state="Active", physical_state="LinkUp", rate=100.0, link_layer="Ethernet",
                   ca_type="MT4125") for i in (8, 9)]
    nominal = {"MT4129": 400, "MT4125": 100}
    got = ib.compute_ports(down + fe, "any", 0, nominal)
    assert {p.ca_type for p in got} == {"MT4129"} and len(got) == 8
    assert {p.ca_type for p in ib.compute_ports(down + fe, "any", 0, None)} == {"MT4125"}
    assert {p.ca_type for p in ib.compute_ports(down + fe, "", 0, {})} == {"MT4125"}
    untyped = [ibp.Port(ca="x", port=1, state="Down", link_layer="Ethernet"), *fe]
    assert [p.ca for p in ib.compute_ports(untyped, "any", 0, {"": 800})] == ["mlx5_8", "mlx5_9"]


def test_compute_ports_reaching_the_rate_are_all_kept():
    ports = [ibp.Port(ca="a", port=1, state="Active", physical_state="LinkUp", rate=400.0, link_layer="InfiniBand",
                      ca_type="MT4129"),
             ibp.Port(ca="b", port=1, state="Active", physical_state="LinkUp", rate=200.0, link_layer="InfiniBand",
                      ca_type="MT4123"),
             ibp.Port(ca="c", port=1, state="Active", physical_state="LinkUp", rate=100.0, link_layer="InfiniBand",
                      ca_type="MT4119")]
    assert [p.ca for p in ib.compute_ports(ports, "any", 200)] == ["a", "b"]
    assert [p.ca for p in ib.compute_ports(ports, "any", 800)] == ["a"]
    assert [p.ca for p in ib.compute_ports(ports, "any", 0)] == ["a"]
    down_fast = ibp.Port(ca="d", port=1, state="Down", physical_state="Disabled", rate=800.0, link_layer="InfiniBand",
                         ca_type="MT4119")
    assert [p.ca for p in ib.compute_ports([*ports, down_fast], "any", 0)] == ["a"]
    assert [p.ca for p in ib.compute_ports(ports, "Ethernet", 0)] == []


def test_compute_ports_are_listed_in_natural_order():
    text = ca_block("mlx5_10", "MT4129", "Active", "LinkUp", 400) + ca_block("mlx5_9", "MT4129", "Active", "LinkUp", 400)
    assert one(text).facts["compute_ports"] == ["mlx5_9/1", "mlx5_10/1"]


def test_tool_failure_exactly():
    text = fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt")
    r = one(text, rc=3, argv=["ibstat", "-s"])
    assert r.summary.startswith("ibstat -s failed after 10 CA(s): ibstat -s exited 3")
    assert r.facts["source_command"] == "ibstat -s"
    assert r.remedy.startswith("drain node; the device is in the device list but cannot be read")
    errs = "".join(f"ibpanic: [1] main: stat of IB device 'mlx5_{i}' failed: No such file or directory\n"
                   for i in (8, 9, 10, 11))
    r = one(text + errs, rc=255)
    assert r.summary.startswith("ibstat failed after 10 CA(s) (device mlx5_8, mlx5_9, mlx5_10, mlx5_11 listed but "
                                "unreadable): ibpanic")
    assert [e for e in r.evidence if e.startswith("ibpanic")] == [ln for ln in errs.splitlines()[:3]]


def test_unknown_state_with_a_missing_field():
    text = "hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tphys_state:\t\tSOMETHING (9)\n"
    r = one(text, argv=["ibv_devinfo"])
    assert r.summary.startswith("not recognised: mlx5_0 port 1 state ?/SOMETHING")


def test_infiniband_profile_with_infiniband_ports(tmp_path: Path):
    prof = tmp_path / "p.toml"
    prof.write_text('[profile]\nname = "p"\nextends = "generic"\n[ib]\n'
                    'link_layer = { value = "InfiniBand", source = "IB fabric" }\n')
    assert one(fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"), profile=str(prof)).status is Status.PASS
    r = one(fixture_text("ib/ibstat_roce_mlx5_3_polling.txt"), profile=str(prof))
    assert r.summary.startswith("no InfiniBand port found; profile expects an InfiniBand compute fabric")
    assert "ib.link_layer = InfiniBand (IB fabric)" in r.evidence
    assert "check the HCA link type (`mlxconfig -d <dev> q LINK_TYPE_P1`) and the cabling" in r.remedy


def test_missing_nics_remedy_only_when_fewer_are_listed():
    blocks = fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt")
    one_down = blocks.replace("State: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400",
                              "State: Down\n\t\tPhysical state: Polling\n\t\tRate: 10", 1)
    r = one(one_down, profile="h100-sxm-8x")
    assert r.facts["codes"] == ["ib.hca/compute-port-down", "ib.hca/compute-ports-missing"]
    assert "lspci" not in r.remedy


def test_adapter_type_note_only_where_the_tool_prints_a_type():
    r = one(fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"))
    assert not any("adapter type" in e for e in r.evidence)
    no_part = "hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tInfiniBand\n"
    r = one(no_part + no_part.replace("mlx5_0", "mlx5_1"), argv=["ibv_devinfo"])
    assert "adapter type not reported for mlx5_0, mlx5_1 (unknown type, not a port fault)" in r.evidence
    r = one(fixture_text("ib/ibdev2netdev_mlx5_3_down.txt"))
    assert not any("adapter type" in e for e in r.evidence)


@pytest.mark.parametrize("text,shape", [
    (fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt"), "8/8 compute ports Active (InfiniBand, rate 400); 2 other "
                                                            "port(s) Active"),
    (fixture_text("ib/ibstat_one_port_mlx5_3_400.txt"), "1/1 compute ports Active (InfiniBand, rate 400)"),
    ("mlx5_0 port 1 ==> ib0 (Up)\n", "1/1 compute ports Active (?, rate ?)"),
    (ca_block("mlx5_0", "MT4129", "Active", "LinkUp", 400, "Ethernet")
     + ca_block("mlx5_1", "MT4123", "Active", "LinkUp", 400, "Ethernet"), "2/2 compute ports Active (Ethernet, rate "
                                                                        "400)"),
])
def test_pass_shapes(text, shape):
    r = one(text)
    assert r.status is Status.PASS and r.summary == shape


def test_shape_lists_layers_and_rates():
    text = fixture_text("ib/ibstat_8x400_ib_2fe_all_active.txt")
    r = one(text, profile="h100-sxm-8x")
    assert r.facts["compute_total"] == 8
    mixed = ca_block("mlx5_0", "MT4129", "Active", "LinkUp", 400) + ca_block("mlx5_1", "MT4129", "Down", "Polling", 10,
                                                                             "Ethernet")
    assert "[1/1 compute ports Active (InfiniBand, rate 400)]" not in one(mixed).summary
    r = one(ca_block("mlx5_0", "MT4129", "Down", "Polling", 10) + ca_block("mlx5_1", "MT4129", "Down", "Polling", 10,
                                                                           "Ethernet"))
    assert r.summary.endswith("[0/1 compute ports Active (InfiniBand, rate ?)]")


def test_no_port_details():
    r = one("No IB devices found\n")
    assert r.summary == "no RDMA devices on this node; profile expects none" and r.evidence == ["No IB devices found"]
    r = one("ibpanic: [4021] main: can't init UMAD library: No such file or directory\n")
    assert r.remedy == "`modprobe ib_umad` and re-run ibstat, or run `ibv_devinfo -v` (it needs no umad)"
    assert r.summary == "ibstat could not read the ports: the umad interface is not available (ib_umad not loaded)"
    r = one("", profile="h100-sxm-8x")
    assert r.remedy == ("check the HCAs are visible (`lspci | grep -i mellanox`, `ls /sys/class/infiniband`), load "
                        "mlx5_core/mlx5_ib (or reinstall the OFED/DOCA driver), reboot")
    assert r.evidence == ["ibstat: no CA listed", "ib.hca_count = 8 (DGX H100: 8 x ConnectX-7 single-port 400G compute "
                                                  "NICs)"]
    errs = ["Failed to open device", "Failed to query device props", "Failed to query port 1 props",
            "Failed to query port 2 props"]
    r = one("\n".join(errs) + "\n", rc=1, argv=["ibv_devinfo"])
    assert r.evidence == errs[:3] and r.summary == \
        "no RDMA ports found (ibv_devinfo failed or listed none)"
    r = one("hello\n", argv=["ibv_devinfo", "-v"])
    assert r.remedy == "run `ibv_devinfo -v` by hand and check its output"
    assert r.facts["source_command"] == "ibv_devinfo -v"


def test_no_input_summary():
    r = grade("ib.hca", {})[0]
    assert r.summary == "no ibstat output or IB link events; RDMA ports not checked"


def test_ethernet_link_events_next_to_ibstat_give_no_flap_facts():
    from tests.conftest import grade_text
    [r] = grade_text("ib.hca", {"ibstat": fixture_text("ib/ibstat_one_port_mlx5_3_400.txt"),
                                "link-events": "[1.0] mlx5_core 0000:17:00.0 ens6f0np0: Link up\n" * 2})
    assert r.status is Status.PASS and "flaps" not in r.facts


def test_link_events_only_summaries():
    from preflight import policy
    from tests.conftest import grade_text
    ups = "Mar 02 11:41:10 n1 systemd-networkd[7]: ib0: Gained carrier\n" \
          "Mar 02 11:41:11 n1 systemd-networkd[7]: ib1: Gained carrier\n"
    [r] = grade_text("ib.hca", {"link-events": ups})
    assert r.status is Status.PASS and r.summary == "IB link events: ib0 0 flap(s), ib1 0 flap(s)"
    mod = ("[ 1702.000021] mlx5_core 0000:c1:00.0: mlx5_port_module_event:1166:(pid 0): Port module event[error]: "
           "module 0, Cable error, High Temperature\n")
    token = policy.use(policy.builtin().with_overrides({"ib.hca/module-error": "pass"}, "site.toml"))
    try:
        [r] = grade_text("ib.hca", {"link-events": mod})
    finally:
        policy.reset(token)
    assert r.status is Status.PASS and r.summary == "IB link events: none"


def test_fail_and_warn_summaries_join_every_finding():
    r = one(fixture_text("ib/hca_table_cx7_one_down_one_init_pcie_x8.txt"))
    assert r.summary.count("; ") == 1 and r.remedy.startswith("drain node; (1) ")
    r = one(THREE)
    assert r.summary.startswith("3/3 compute ports Active (InfiniBand, rate 100/200/400); compute port(s) below")
    text = THREE + ("hca_id:\tmlx5_7\n\tvendor_part_id:\t\t\t4129\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
                    "\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t1024 (3)\n\t\t\tlink_layer:\t\tInfiniBand\n")
    r = one(text)
    assert r.summary == ("4/4 compute ports Active (InfiniBand, rate 100/200/400); compute port(s) below their "
                         "adapter's rate: mlx5_0 (MT4129) at 200 of 400, mlx5_1 (MT4129) at 100 of 400; active MTU "
                         "below the port's maximum: mlx5_7 1024 of 4096")


def dual(name, second_state, second_phys, first_state="Active", first_phys="LinkUp"):
    return (f"CA '{name}'\n\tCA type: MT4123\n\tNumber of ports: 2\n\tPort 1:\n\t\tState: {first_state}\n"
            f"\t\tPhysical state: {first_phys}\n\t\tRate: 200\n\t\tLink layer: InfiniBand\n\tPort 2:\n"
            f"\t\tState: {second_state}\n\t\tPhysical state: {second_phys}\n"
            f"\t\tRate: {200 if second_state == 'Active' else 10}\n\t\tLink layer: InfiniBand\n")


def test_uncabled_second_ports_of_dual_port_adapters_are_not_rails():
    r = one(dual("mlx5_0", "Down", "Disabled") + dual("mlx5_1", "Down", "Polling"))
    assert r.status is Status.WARN and r.facts["codes"] == ["ib.hca/other-port-down"]
    assert r.facts["compute_ports"] == ["mlx5_0/1", "mlx5_1/1"]
    # one adapter's second port up: the second ports are in use, a down one is a rail down
    r = one(dual("mlx5_0", "Active", "LinkUp") + dual("mlx5_1", "Down", "Polling"))
    assert r.facts["codes"] == ["ib.hca/compute-port-down"] and "mlx5_1 Down/Polling" in r.summary
    # every first port down too: nothing says which ports are cabled
    r = one(dual("mlx5_0", "Down", "Disabled", "Down", "Polling"))
    assert r.facts["compute_total"] == 2


def test_unused_ports_rule():
    ports = parse(dual("mlx5_0", "Down", "Disabled") + dual("mlx5_1", "Down", "Polling")).ports
    assert ib._unused_ports(ports) == {("mlx5_0", 2), ("mlx5_1", 2)}
    assert ib._unused_ports(parse(dual("mlx5_0", "Active", "LinkUp")).ports) == set()
    assert ib._unused_ports(parse(dual("mlx5_0", "Down", "Disabled", "Down", "Polling")).ports) == set()
    assert ib._unused_ports(parse(fixture_text("ib/ibstat_one_port_mlx5_3_400.txt")).ports) == set()


def fn(name: str, state: str = "Active", phys: str = "LinkUp", rate: int = 200) -> str:
    """One ConnectX function, one port, RoCE (ibstat)."""
    return (f"CA '{name}'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: {state}\n"
            f"\t\tPhysical state: {phys}\n\t\tRate: {rate}\n\t\tBase lid: 0\n\t\tLink layer: Ethernet\n")


def test_a_second_pci_function_down_beside_an_active_first_is_uncabled():
    text = fn("roceP2p1s0f0") + fn("roceP2p1s0f1", "Down", "Disabled", 40) + fn("rocep1s0f0")
    r = one(text)
    assert r.status is Status.WARN and "ib.hca/compute-port-down" not in r.facts["codes"]
    assert "ib.hca/other-port-down" in r.facts["codes"] and "roceP2p1s0f1" in r.summary
    assert r.facts["compute_ports"] == ["roceP2p1s0f0/1", "rocep1s0f0/1"]
    assert ib._unused_ports(parse(text).ports) == {("roceP2p1s0f1", 1)}


@pytest.mark.parametrize("text", [
    # every adapter's second function up but one: that one is a rail down
    fn("rocep1s0f0") + fn("rocep1s0f1") + fn("rocep2s0f0") + fn("rocep2s0f1", "Down", "Disabled", 40),
    # the first function down as well: nothing says which is cabled
    fn("rocep1s0f0", "Down", "Disabled", 40) + fn("rocep1s0f1", "Down", "Disabled", 40) + fn("rocep2s0f0"),
    # names that say nothing of the function
    fn("mlx5_0") + fn("mlx5_1", "Down", "Disabled", 40),
])
def test_function_siblings_that_prove_nothing_leave_the_port_a_rail(text: str):
    assert ib._unused_ports(parse(text).ports) == set()
    assert "ib.hca/compute-port-down" in one(text).facts["codes"]


@pytest.mark.parametrize(("text", "state"), [
    ("...\nPort 1:\n                State: Down\n                Physical state: Polling\n...\n", "Down/Polling"),
    ("\tPort 2:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n", ""),
])
def test_a_port_block_without_its_ca_line(text: str, state: str):
    d = Doc.join(frame(text).docs)
    assert ibp.detect(d)
    [p] = ibp.parse(d).ports
    assert p.ca == ibp.NO_CA == "(CA not shown)"
    r = one(text)
    if state:
        assert r.facts["codes"] == ["ib.hca/compute-port-down"] and f"(CA not shown) {state}" in r.summary
    else:
        assert r.status is Status.PASS


@pytest.mark.parametrize("text", ["Port 1:\nState: unknown\nPhysical state: x\n", "Port 1:\n  Speed: 100\n",
                                  "Port 1:\nPhysical state: Polling\n"])
def test_other_port_lines_are_not_ibstat(text: str):
    assert not ibp.detect(Doc.join(frame(text).docs))


def _ibstatus_block(ca: str, state: str | None = "4: ACTIVE") -> str:
    head = (f"Infiniband device '{ca}' port 1 status:\n\tdefault gid:\t fe80:0000:0000:0000:5e25:73ff:fe94:212a\n"
            "\tbase lid:\t 0x0\n\tsm lid:\t\t 0x0\n")
    if state is None:
        return head
    return head + f"\tstate:\t\t {state}\n\tphys state:\t 5: LinkUp\n\trate:\t\t 200 Gb/sec (4X HDR)\n" \
                  "\tlink_layer:\t Ethernet\n\n"


def test_a_paste_cut_inside_the_last_port_before_its_state() -> None:
    text = _ibstatus_block("mlx5_bond_0") + _ibstatus_block("mlx5_bond_1") + _ibstatus_block("mlx5_bond_2", None)
    rep = parse(text)
    assert [p.ca for p in rep.ports] == ["mlx5_bond_0", "mlx5_bond_1"] and rep.cut is not None
    assert (rep.cut.ca, rep.cut.port, rep.cut.state) == ("mlx5_bond_2", 1, "")
    r = one(text, argv=["ibstatus"])
    assert r.status is Status.PASS, r.summary
    assert r.summary == "2/2 compute ports Active (Ethernet, rate 200); mlx5_bond_2 port 1 cut before its state"
    assert r.facts["cut_port"] == "mlx5_bond_2/1" and r.facts["compute_total"] == 2
    assert "mlx5_bond_2 port 1: the capture ends inside its block, before its state line: not graded" in r.evidence


@pytest.mark.parametrize("text", [
    # a port without a state in the middle of the output: a state nobody printed, said
    _ibstatus_block("mlx5_0") + _ibstatus_block("mlx5_1", None) + _ibstatus_block("mlx5_2"),
    # the only port: nothing to grade it against, said
    _ibstatus_block("mlx5_0", None),
])
def test_a_port_without_state_that_is_not_a_cut_end_is_not_recognised(text: str) -> None:
    rep = parse(text)
    assert rep.cut is None
    r = one(text, argv=["ibstatus"])
    assert "ib.hca/port-state-unknown" in r.facts["codes"] and r.status is not Status.PASS



def test_front_end_port_down_without_a_physical_state_reads_cleanly() -> None:
    text = ("hca_id:\tmlx5_0\n\tvendor_part_id:\t\t\t4123\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
            "\t\t\tport_lid:\t\t7\n\t\t\tlink_layer:\t\tInfiniBand\n\n"
            "hca_id:\tmlx5_1\n\tvendor_part_id:\t\t\t4125\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n"
            "\t\t\tlink_layer:\t\tEthernet\n")
    r = one(text, argv=["ibv_devinfo"])
    assert r.status is Status.WARN and r.facts["codes"] == ["ib.hca/other-port-down"]
    assert r.summary.endswith("; non-compute port(s) down: mlx5_1 (Ethernet Down)")


def test_one_port_shown_and_the_next_cut() -> None:
    rep = parse(_ibstatus_block("mlx5_0") + _ibstatus_block("mlx5_1", None))
    assert [p.ca for p in rep.ports] == ["mlx5_0"] and rep.cut is not None and rep.cut.ca == "mlx5_1"

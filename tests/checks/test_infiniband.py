"""ib.hca: ibstat / ibstatus / ibv_devinfo parsing and compute-port grading."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.checks import infiniband as ib
from preflight.framing import frame
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

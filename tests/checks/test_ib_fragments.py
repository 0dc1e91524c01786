"""ib.hca on fragments (grep'd ibstatus / ibstat field lines without the device header), on the
tools' error lines no rule reads, and on the RDMA drivers' error lines in a kernel log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from preflight import registry as reg
from preflight.analyze import analyze
from preflight.framing import frame
from preflight.model import Result, Status
from preflight.parsers import ib as ibp
from tests.conftest import capture, grade, grade_text


def one(text: str, profile: str = "generic", argv: list[str] | None = None) -> Result:
    res = grade("ib.hca", {"ibstat": capture("ibstat", text, argv=argv or ["ibstatus"])}, profile=profile)
    assert len(res) == 1
    return res[0]


def parse(text: str) -> ibp.IbReport:
    return ibp.parse(frame(text).docs[0])


def analyzed(text: str) -> list[Result]:
    """`preflight analyze -` over the text (generic profile): the results of every check."""
    return analyze(reg.load(), [Path("-")], "generic", stdin=io.BytesIO(text.encode()))


def _ibstatus(state: str, phys: str, rate: str, layer: str = "InfiniBand") -> list[str]:
    return [f"\tstate:\t\t {state}", f"\tphys state:\t {phys}", f"\trate:\t\t {rate}", f"\tlink_layer:\t {layer}"]


# ibstatus | grep -A 1 "phys state" over 4 ports, one trained at 2X: grep prints `--` between groups
GREP_A1 = "\n".join([
    "\tphys state:\t 5: LinkUp", "\trate:\t\t 200 Gb/sec (4X HDR)", "--",
    "\tphys state:\t 5: LinkUp", "\trate:\t\t 100 Gb/sec (2X HDR)", "--",
    "\tphys state:\t 5: LinkUp", "\trate:\t\t 200 Gb/sec (4X HDR)", "--",
    "\tphys state:\t 5: LinkUp", "\trate:\t\t 200 Gb/sec (4X HDR)"]) + "\n"


# --------------------------------------------------------------------------------------------
# parser


def test_grep_A1_groups_are_unnamed_ports_with_width():
    rep = parse(GREP_A1)
    assert rep.kind == "fragment" and rep.fragment
    assert [(p.ca, p.unnamed, p.physical_state, p.rate, p.width) for p in rep.ports] == [
        ("(unnamed #1)", 1, "LinkUp", 200.0, 4), ("(unnamed #2)", 2, "LinkUp", 100.0, 2),
        ("(unnamed #3)", 3, "LinkUp", 200.0, 4), ("(unnamed #4)", 4, "LinkUp", 200.0, 4)]
    assert rep.ports[1].lines == ["phys state:\t 5: LinkUp", "rate:\t\t 100 Gb/sec (2X HDR)"]
    assert rep.ports[1].fact()["unnamed"] is True and rep.ports[1].fact()["width"] == 2
    assert rep.cut is None  # a fragment's last group is not a port cut short


def test_a_repeated_field_starts_the_next_port_without_separators():
    """`grep -E 'state|rate'` prints no `--`: a field the group already has opens the next port."""
    text = "\n".join(_ibstatus("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")[:3]
                     + _ibstatus("1: DOWN", "3: Disabled", "40 Gb/sec (4X QDR)")[:3]) + "\n"
    rep = parse(text)
    assert [(p.state, p.physical_state, p.rate) for p in rep.ports] == [
        ("Active", "LinkUp", 400.0), ("Down", "Disabled", 40.0)]


def test_ibstat_fields_without_headers_and_a_ca_line_opening_a_group():
    text = ("\tCA type: MT4129\n\t\tState: Active\n\t\tRate: 400\n"
            "\tCA type: MT4129\n\t\tState: Active\n\t\tRate: 200\n")
    rep = parse(text)
    assert [(p.ca_type, p.state, p.rate, p.unnamed) for p in rep.ports] == [
        ("MT4129", "Active", 400.0, 1), ("MT4129", "Active", 200.0, 2)]


@pytest.mark.parametrize("ca_line", ["\tNumber of ports: 1\n", "\tNode GUID: 0x946dae0300d1a3b4\n"])
def test_a_ca_line_closes_the_group_even_when_the_next_port_shows_other_fields(ca_line):
    """`ibstat | grep -E 'Number of ports|Active|Polling'`: one CA's port shows its state line, the
    next CA's its physical state line; the CA line between them separates the two ports."""
    rep = parse(ca_line + "\t\tState: Active\n" + ca_line + "\t\tPhysical state: Polling\n")
    assert [(p.unnamed, p.state, p.physical_state) for p in rep.ports] == [(1, "Active", ""), (2, "", "Polling")]


def test_ibv_devinfo_fragment_keeps_the_vendor_part_id_and_the_lmc_line():
    """`ibv_devinfo -v | grep -E 'vendor_part_id|state|port_lmc|link_layer'`."""
    rep = parse("\tvendor_part_id:\t\t\t4123\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tport_lmc:\t\t0x00\n"
                "\t\t\tlink_layer:\t\tInfiniBand\n\t\t\tphys_state:\t\tLINK_UP (5)\n")
    assert [(p.ca_type, p.state, p.physical_state, p.link_layer) for p in rep.ports] == [
        ("MT4123", "Active", "LinkUp", "InfiniBand")]
    assert rep.ports[0].lines[1] == "port_lmc:\t\t0x00"


def test_a_named_port_cut_before_its_state_after_a_fragment_is_the_cut_port():
    """grep'd field lines, then ibstatus whose one block the paste ends inside: that block is the
    port cut short (the fragment's port before it does not change that)."""
    text = ("\n".join(_ibstatus("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")) + "\n"
            "Infiniband device 'mlx5_1' port 1 status:\n\tdefault gid:\t fe80:0000:0000:0000:5e25:73ff:fe94:212a\n"
            "\tbase lid:\t 0x0\n")
    rep = parse(text)
    assert [p.ca for p in rep.ports] == ["(unnamed #1)"]
    assert rep.cut is not None and (rep.cut.ca, rep.cut.port) == ("mlx5_1", 1)


def test_kernel_rate_spellings_give_the_width():
    for rate, width in (("2.5 Gb/sec (1X)", 1), ("10 Gb/sec (4X)", 4), ("56 Gb/sec (4X FDR)", 4),
                        ("300 Gb/sec (12X EDR)", 12), ("800 Gb/sec (4X XDR)", 4)):
        rep = parse(f"\trate:\t\t {rate}\n\tlink_layer:\t InfiniBand\n")
        assert rep.ports[0].width == width, rate


@pytest.mark.parametrize("text,want", [
    (GREP_A1, True),
    ("\tstate:\t\t 4: ACTIVE\n", True),
    ("\trate:\t\t 200 Gb/sec (4X HDR)\n", True),
    ("\t\tPhysical state: LinkUp\n\t\tRate: 400\n", True),
    ("\tbase lid:\t 0x33bf\n\tsm lid:\t\t 0x1\n", True),  # recognised, then SKIP: nothing to grade
    ("\t\tState: Active\n\t\tRate: 400\n", False),  # too common a shape without an ibstat-only line
    ("state: running\nrate: 5\n", False),
    ("\tstate:\t\t 4: ACTIVE\nsome other tool output\nmore of it\nand more\n", False),  # mostly not fields
])
def test_fragment_detection(text, want):
    assert ibp.detect(frame(text).docs[0]) is want


def test_fragment_detection_trusts_a_prompt_that_ran_the_tool():
    doc = frame("[root@gpu017 ~]# ibstat | grep -E 'State|Rate'\n\t\tState: Active\n\t\tRate: 400\n").docs[0]
    assert ibp.detect(doc)


# --------------------------------------------------------------------------------------------
# grading


def test_one_port_at_2x_among_4x_is_the_width_finding_not_unrecognised():
    r = one(GREP_A1)
    assert r.status is Status.FAIL
    assert r.facts["codes"] == ["ib.hca/width-reduced"]  # not also rate-below-siblings for the same port
    assert "(unnamed #2) at 2X (others 4X)" in r.summary
    assert "ports unnamed" in r.summary and "port count is not graded" in r.summary
    assert r.evidence[0] == "(unnamed #2): phys state: 5: LinkUp | rate: 100 Gb/sec (2X HDR)"


def test_grep_A1_through_analyze_is_ib_hca_not_unrecognised():
    results = analyzed(GREP_A1)
    assert [(r.check, r.status) for r in results] == [("ib.hca", Status.FAIL)]
    assert results[0].facts["codes"] == ["ib.hca/width-reduced"]


def test_pdsh_prefixed_fragment_is_read_per_host():
    lines = GREP_A1.strip("\n").split("\n")
    text = "".join(f"gpu{h:03d}: {ln}\n" for h in (1, 2) for ln in (lines if h == 1 else lines[:2]))
    got = {(r.node, r.check): r for r in analyzed(text)}
    assert got[("gpu001", "ib.hca")].facts["codes"] == ["ib.hca/width-reduced"]
    assert got[("gpu002", "ib.hca")].status is Status.PASS


def test_all_ports_at_4x_pass_saying_what_was_shown():
    r = one("\n".join(_ibstatus("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)") * 2) + "\n")
    assert r.status is Status.PASS, r.summary
    assert r.summary == ("2 port(s) in a fragment without device names (ports unnamed; the port count is not "
                         "graded): 2 Active, rate 400 4X")


def test_rate_only_fragment_says_the_state_was_not_shown():
    r = one("\trate:\t\t 200 Gb/sec (4X HDR)\n\trate:\t\t 200 Gb/sec (4X HDR)\n")
    assert r.status is Status.PASS and "port state not shown" in r.summary


def test_a_down_port_in_a_fragment_fails_with_its_physical_state():
    r = one("\n".join(_ibstatus("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")[:2]
                      + _ibstatus("1: DOWN", "2: Polling", "10 Gb/sec (4X)")[:2]) + "\n")
    assert r.status is Status.FAIL and r.facts["codes"] == ["ib.hca/compute-port-down"]
    assert "(unnamed #2) Down/Polling" in r.summary
    assert "(unnamed #2) is Polling" in r.remedy


def test_physical_state_alone_down_is_a_down_port():
    r = one("\tphys state:\t 5: LinkUp\n\tphys state:\t 3: Disabled\n")
    assert r.status is Status.FAIL and r.facts["codes"] == ["ib.hca/compute-port-down"]


def test_fragment_without_link_layer_on_an_infiniband_profile_is_not_no_infiniband_port():
    r = one("\tphys state:\t 5: LinkUp\n\trate:\t\t 400 Gb/sec (4X NDR)\n" * 8, profile="h100-sxm-8x")
    assert r.status is Status.PASS, r.summary


def test_fragment_is_not_counted_against_hca_count():
    """A fragment of 2 ports on an 8-rail profile: it cannot show how many ports the node has."""
    r = one("\tphys state:\t 5: LinkUp\n\trate:\t\t 400 Gb/sec (4X NDR)\n" * 2, profile="h100-sxm-8x")
    assert "ib.hca/compute-ports-missing" not in r.facts.get("codes", [])
    assert r.status is Status.PASS


def test_a_slower_port_at_4x_is_still_the_sibling_rate_finding():
    r = one("\trate:\t\t 200 Gb/sec (4X HDR)\n\trate:\t\t 100 Gb/sec (4X EDR)\n")
    assert r.facts["codes"] == ["ib.hca/rate-below-siblings"]


def test_every_port_at_2x_warns_unless_the_profile_rate_is_met(tmp_path):
    text = "\tphys state:\t 5: LinkUp\n\trate:\t\t 100 Gb/sec (2X HDR)\n" * 2
    r = one(text)
    assert r.status is Status.WARN and r.facts["codes"] == ["ib.hca/width-narrow"]
    prof = tmp_path / "hdr100.toml"
    prof.write_text('extends = "generic"\n[ib]\nrate = { value = 100, source = "HDR100 split cables" }\n')
    assert one(text, profile=str(prof)).status is Status.PASS


def test_named_ibstatus_port_at_2x_among_4x_is_the_width_finding_too():
    text = "".join(f"Infiniband device 'mlx5_{i}' port 1 status:\n" + "\n".join(
        _ibstatus("4: ACTIVE", "5: LinkUp", "100 Gb/sec (2X HDR)" if i == 1 else "200 Gb/sec (4X HDR)")) + "\n\n"
        for i in range(3))
    r = one(text)
    assert r.facts["codes"] == ["ib.hca/width-reduced"] and "mlx5_1 at 2X (others 4X)" in r.summary
    assert "ports unnamed" not in r.summary


def test_fragment_with_nothing_gradeable_is_skip():
    r = one("\tbase lid:\t 0x33bf\n\tsm lid:\t\t 0x1\n\tbase lid:\t 0x33be\n\tsm lid:\t\t 0x1\n")
    assert r.status is Status.SKIP and r.facts["codes"] == ["ib.hca/fragment-nothing-to-grade"]
    assert "base lid, sm lid" in r.summary


def test_fragment_with_an_unknown_state_value_is_said():
    r = one("\tstate:\t\t 4: ACTIVE\n\tstate:\t\t unknown\n")
    assert "ib.hca/port-state-unknown" in r.facts["codes"]


# --------------------------------------------------------------------------------------------
# error lines no rule reads


def test_an_unknown_error_line_beside_the_ports_warns_unread():
    text = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
            "\t\tRate: 400\n\t\tLink layer: InfiniBand\numad_init failed\n")
    r = one(text, argv=["ibstat"])
    assert r.status is Status.WARN and r.facts["codes"] == ["ib.hca/unread-error"]
    assert r.evidence[0] == "umad_init failed"
    assert "1/1 compute ports Active" in r.summary


def test_an_unknown_error_line_alone_under_a_prompt_warns_unread():
    results = analyzed("[root@gpu017 ~]# ibv_devinfo\nlibibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so'\n")
    mine = [r for r in results if r.check == "ib.hca"]
    assert mine and mine[0].facts["codes"] == ["ib.hca/unread-error"], [(r.check, r.summary) for r in results]


def test_known_tool_errors_are_not_unread():
    rep = parse("ibpanic: [1234] main: stat of IB device 'mlx5_8' failed: No such file or directory\n")
    assert rep.errors and not rep.unread


# --------------------------------------------------------------------------------------------
# the RDMA drivers' kernel lines


HEALTH = ("[   17.982092] mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached "
          "miss count\n"
          "[   17.982150] mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): assert_var[0] 0x00000000\n"
          "[   17.982217] mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): synd 0x8: unrecoverable hardware "
          "error\n")


@pytest.mark.parametrize("line,fatal", [
    ("mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count", True),
    ("mlx5_core 0000:c1:00.0: poll_health:795:(pid 0): Fatal error 1 detected", True),
    ("mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): synd 0x1: firmware internal error", True),
    ("mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command "
     "resource", True),
    ("mlx5_core 0000:03:00.0: mlx5_health_try_recover:330:(pid 9): health recovery flow aborted, PCI reads still "
     "not working", True),
    ("mlx5_core 0000:03:00.0: probe_one:1875:(pid 1): mlx5_init_one failed with error code -110", True),
    ("mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, status bad "
     "operation(0x2), syndrome (0x305684), err(-22)", False),
    ("infiniband mlx5_3: create_qp_common:2155:(pid 4021): Create QP type 2 failed", False),
    ("0000:3b:00.0:mlx5_cmd_check:718:(pid 2): QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, status bad "
     "parameter(0x3), syndrome (0x5c1f1)", False),  # Linux 3.x: pr_err with the device name only
])
def test_kernel_error_lines(line, fatal):
    got = ibp.kernel_line(line)
    assert got is not None and got.fatal is fatal
    assert got.device in ("0000:41:00.0", "0000:c1:00.0", "0000:03:00.0", "0000:d2:00.0", "mlx5_3", "0000:3b:00.0")


# each line is found by one needle and one error word only (in brackets)
@pytest.mark.parametrize("line,fatal", [
    # Linux 4.x probe_one's dev_err, no `(pid N)` (mlx5_core)
    ("[  812.113] mlx5_core 0000:41:00.0: mlx5_load_one failed with error code -110", True),
    # ib_core cache.c's dev_warn on the RDMA device (infiniband; fail)
    ("[  812.200] infiniband mlx5_2: ib_query_port failed (-110)", False),
    # eq.c's mlx5_core_warn (err)
    ("[  812.300] mlx5_core 0000:41:00.0: cq_err_event_notifier:517:(pid 0): CQ error on CQN 0x4c5, syndrome 0x1",
     False),
    # health.c's poll_health after the miss count (unable)
    ("[  812.400] mlx5_core 0000:41:00.0: poll_health:852:(pid 0): FW is unable to respond to initialization segment "
     "reads", True),
    # sriov.c (cannot)
    ("[  812.500] mlx5_core 0000:41:00.0: mlx5_core_sriov_configure:211:(pid 4431): cannot modify number of VFs while "
     "VFs are assigned", False),
])
def test_kernel_lines_each_needle_and_error_word_finds(line, fatal):
    doc = frame(line + "\n").docs[0]
    got = ibp.parse_kernel(doc).lines
    assert ibp.detect_kernel(doc) and [(x.text, x.fatal) for x in got] == [(line.split("] ", 1)[1], fatal)]


@pytest.mark.parametrize("line", [
    "mlx5_core 0000:41:00.0: firmware version: 28.39.1002",
    "mlx5_core 0000:41:00.0: mlx5_pcie_event:299:(pid 5): PCIe slot advertised sufficient power (75W).",
    "mlx5_core 0000:5c:00.0: Port module event[error]: module 0, Cable error, High Temperature",  # parsers.netlog
    "mlx5_core 0000:5c:00.0 ens1np0: Link down",  # parsers.netlog
    "mlx5_core 0000:5c:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",  # kernel_hw
    "mlx5_core 0000:5c:00.0:    [ 0] RxErr                  (First)",  # kernel_hw
    "nvidia 0000:3b:00.0: failed to do something",
])
def test_kernel_lines_read_elsewhere_or_informational_are_not_taken(line):
    assert ibp.kernel_line(line) is None


def test_health_compromised_fails_ib_hca_and_the_dump_lines_are_not_unread():
    results = analyzed(HEALTH)
    ib = [r for r in results if r.check == "ib.hca"]
    assert len(ib) == 1 and ib[0].status is Status.FAIL and ib[0].facts["codes"] == ["ib.hca/hca-fatal"]
    assert ib[0].summary.startswith("RDMA adapter stopped: 0000:41:00.0: device's health compromised")
    assert ib[0].facts["kernel_fatal"] == ["0000:41:00.0"]


def test_an_unread_mlx5_error_line_warns():
    results = analyzed("[ 1234.5] mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) "
                       "op_mod(0x1) failed, status bad operation(0x2), syndrome (0x305684), err(-22)\n"
                       "[ 1235.0] mlx5_core 0000:d2:00.0: firmware version: 28.39.1002\n")
    ib = [r for r in results if r.check == "ib.hca"]
    assert len(ib) == 1 and ib[0].status is Status.WARN and ib[0].facts["codes"] == ["ib.hca/unread-error"]
    assert ib[0].evidence[0].startswith("mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838")


def test_a_kernel_log_with_only_informational_mlx5_lines_gives_no_ib_result():
    results = analyzed("[    1.0] mlx5_core 0000:d2:00.0: firmware version: 28.39.1002\n"
                       "[    1.1] mlx5_core 0000:d2:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 97656Mbps\n")
    assert not [r for r in results if r.check == "ib.hca"]


def test_ibstat_beside_a_fatal_kernel_line_keeps_both():
    ib_text = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
               "\t\tRate: 400\n\t\tLink layer: InfiniBand\n")
    r = grade_text("ib.hca", {"ibstat": ib_text, "rdma-kernel": HEALTH})[0]
    assert r.status is Status.FAIL and r.facts["codes"] == ["ib.hca/hca-fatal"]
    assert "1/1 compute ports Active" in r.summary and "kernel log: 2 fatal RDMA adapter line(s)" in r.summary

"""Failed systemd units graded by the check that owns their concern (checks/units.py), through analyze."""

from __future__ import annotations

import pytest

from preflight.model import Result, Status
from tests.conftest import analyze_text, fixture_text, grade_text


def by_check(results: list[Result]) -> dict[str, Result]:
    return {r.check: r for r in results}


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


@pytest.mark.parametrize("name", ["failed-legacy-legend.txt", "failed-arrow-legend.txt"])
def test_failed_listing_graded_by_each_owner(name: str) -> None:
    got = by_check(analyze_text(fixture_text("systemd-units/" + name)))
    assert "analyze.unrecognised" not in got
    assert got["gpu.driver"].status is Status.WARN and codes(got["gpu.driver"]) == ["gpu.driver/unit-failed"]
    assert "nvidia-persistenced.service" in got["gpu.driver"].summary and "nvidia-dcgm.service" in got["gpu.driver"].summary
    assert got["ib.hca"].status is Status.FAIL and codes(got["ib.hca"]) == ["ib.hca/unit-failed"]
    assert got["node.clock"].status is Status.WARN and codes(got["node.clock"]) == ["node.clock/unit-failed"]
    assert got["fabric.manager"].status is Status.FAIL
    assert "fabric.manager/service-not-running" in codes(got["fabric.manager"])
    # the unit no check owns is said, not dropped, by node.units alone
    assert got["node.units"].status is Status.WARN and codes(got["node.units"]) == ["node.units/unit-failed"]
    assert got["node.units"].summary.startswith("rasdaemon.service (RAS daemon to log the RAS events) failed")
    assert not any("rasdaemon" in e for check in ("gpu.driver", "ib.hca", "node.clock") for e in got[check].evidence)
    assert "systemctl status rasdaemon.service" in got["node.units"].remedy


@pytest.mark.parametrize("name,check,status", [
    ("persistenced-failed-status.txt", "gpu.driver", Status.WARN),
    ("openibd-failed-journal.txt", "ib.hca", Status.FAIL),
    ("chronyd-failed-status-el7.txt", "node.clock", Status.WARN),
])
def test_failed_unit_graded_by_owner(name: str, check: str, status: Status) -> None:
    got = by_check(analyze_text(fixture_text("systemd-units/" + name)))
    assert got[check].status is status
    assert f"{check}/unit-failed" in codes(got[check])
    assert "analyze.unrecognised" not in got


def test_persistenced_evidence_leads_with_its_state_and_its_reason() -> None:
    r = by_check(analyze_text(fixture_text("systemd-units/persistenced-failed-status.txt")))["gpu.driver"]
    assert r.evidence[0].startswith("Active: failed (Result: exit-code)")
    assert any("Failed to query NVIDIA devices" in e for e in r.evidence)
    assert "`systemctl status nvidia-persistenced.service`" in r.remedy


def test_chronyd_unit_failure_joins_the_logs_own_finding() -> None:
    r = by_check(analyze_text(fixture_text("systemd-units/chronyd-failed-status-el7.txt")))["node.clock"]
    assert codes(r)[:1] == ["node.clock/unit-failed"] and "node.clock/daemon-exited" in codes(r)
    assert "chronyd stopped" in r.summary


@pytest.mark.parametrize("name,check", [("persistenced-running-status.txt", "gpu.driver"),
                                        ("chronyd-running-status-el7.txt", "node.clock"),
                                        ("openibd-exited-status.txt", "ib.hca")])
def test_running_units_pass(name: str, check: str) -> None:
    results = analyze_text(fixture_text("systemd-units/" + name))
    got = by_check(results)
    assert got[check].status is Status.PASS, got[check]
    assert all(r.status is Status.PASS for r in results)
    assert any(e.startswith("Active: active") for e in got[check].evidence)


def test_unit_journal_of_a_restart_loop() -> None:
    text = ("Dec 05 10:00:01 gpu01 systemd[1]: nvidia-dcgm.service: Main process exited, code=killed, status=6/ABRT\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: nvidia-dcgm.service: Start request repeated too quickly.\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: nvidia-dcgm.service: Failed with result 'start-limit-hit'.\n")
    r = by_check(analyze_text(text))["gpu.driver"]
    assert r.status is Status.WARN and "start-limit-hit" in r.summary


def test_timesyncd_and_ntpd_owned_by_clock() -> None:
    text = ("  UNIT                      LOAD   ACTIVE SUB    DESCRIPTION\n"
            "● systemd-timesyncd.service loaded failed failed Network Time Synchronization\n"
            "● ntpd.service              loaded failed failed Network Time Service\n\n"
            "2 loaded units listed.\n")
    r = by_check(analyze_text(text))["node.clock"]
    assert r.status is Status.WARN and "systemd-timesyncd.service" in r.summary and "ntpd.service" in r.summary


def test_only_unowned_failed_units_grade_no_owner() -> None:
    text = "  UNIT LOAD ACTIVE SUB DESCRIPTION\n● rasdaemon.service loaded failed failed RAS daemon\n1 loaded units listed.\n"
    got = by_check(analyze_text(text))
    assert not {"gpu.driver", "ib.hca", "node.clock"} & set(got)
    assert got["node.units"].status is Status.WARN and "rasdaemon.service" in got["node.units"].summary


def test_unowned_unit_named_by_description_only() -> None:
    r = by_check(analyze_text("Dec 05 10:00:02 gpu01 systemd[1]: Failed to start Postfix Mail Transport Agent.\n"))
    assert r["node.units"].status is Status.WARN
    assert r["node.units"].evidence == ["Dec 05 10:00:02 gpu01 systemd[1]: Failed to start Postfix Mail Transport Agent."]
    assert "described as 'Postfix Mail Transport Agent'" in r["node.units"].remedy


def test_every_failed_unit_owned_leaves_node_units_silent() -> None:
    got = by_check(analyze_text(fixture_text("systemd-units/persistenced-failed-status.txt")))
    assert "node.units" not in got


def test_unit_failure_beside_the_checks_own_input() -> None:
    """ibstat all Active and openibd failed in the same node's captures: the unit's FAIL is not hidden."""
    ibstat = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
              "\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n")
    units = "● openibd.service loaded failed failed openibd - configure Mellanox devices\n1 loaded units listed.\n"
    [r] = [x for x in grade_text("ib.hca", {"ibstat": ibstat, "systemd-units": units}) if x.check == "ib.hca"]
    assert r.status is Status.FAIL and codes(r)[0] == "ib.hca/unit-failed"
    alone = grade_text("ib.hca", {"ibstat": ibstat})
    assert alone[0].status is not Status.FAIL


@pytest.mark.parametrize("text,check", [
    ("[root@gpu01 ~]# systemctl start openibd\n"
     "Job for openibd.service failed because the control process exited with error code.\n"
     "See \"systemctl status openibd.service\" and \"journalctl -xeu openibd.service\" for details.\n", "ib.hca"),
    ("Job for chronyd.service failed because the control process exited with error code. See \"systemctl status "
     "chronyd.service\" and \"journalctl -xe\" for details.\n", "node.clock"),
    ("Job for nvidia-persistenced.service failed. See \"systemctl status nvidia-persistenced.service\" and "
     "\"journalctl -xe\" for details.\n", "gpu.driver"),
])
def test_failed_start_graded_by_owner(text: str, check: str) -> None:
    r = by_check(analyze_text(text))[check]
    assert r.status in (Status.WARN, Status.FAIL) and codes(r) == [f"{check}/unit-failed"]
    assert "start-failed" in r.summary and r.evidence[0].startswith("Job for ")


IBSTAT_ACTIVE = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
                 "\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n")


def run_mode(check_id: str, inputs: dict[str, str]) -> list[Result]:
    """Grade one check as `preflight run` does (the probes ran here: the check's own tools were asked)."""
    from preflight import registry as reg
    from preflight.framing import frame
    from preflight.grading import FactStore, grade_check
    from preflight.registry import Options
    from tests.conftest import load_profile

    r = reg.load()
    docs = {probe: frame(text, origin=f"fixture:{probe}").docs for probe, text in inputs.items()}
    return grade_check(r.checks[check_id], "node1", FactStore(r, docs=docs), load_profile("generic"), Options(), None)


@pytest.mark.parametrize("row,check,concern,remedy", [
    ("● nvidia-persistenced.service loaded failed failed NVIDIA Persistence Daemon", "gpu.driver",
     "the GPU driver's daemons (persistence mode, DCGM health monitoring)", "persistence mode and DCGM health watches"),
    ("● openibd.service loaded failed failed openibd - configure Mellanox devices", "ib.hca",
     "the InfiniBand/RDMA driver stack (HCA modules, GPUDirect RDMA)", "the HCA driver stack is not (fully) loaded"),
    ("● chronyd.service loaded failed failed NTP client/server", "node.clock",
     "clock synchronisation", "nothing keeps the clock on time while it is down"),
])
def test_owned_unit_failure_names_the_concern_and_its_remedy(row: str, check: str, concern: str, remedy: str) -> None:
    unit, desc = row.split()[1], row.split(None, 5)[5]
    [r] = grade_text(check, {"systemd-units": f"  UNIT LOAD ACTIVE SUB DESCRIPTION\n{row}\n1 loaded units listed.\n"})
    assert r.summary == f"{unit} ({desc}) failed: {concern} not served"
    assert r.remedy.startswith(remedy)
    assert r.remedy.endswith(f"read `systemctl status {unit}` and `journalctl -u {unit} -b`, fix the cause, "
                             "then restart the unit")
    assert r.facts["units"] == [{"unit": unit, "active": "failed", "sub": "failed", "result": ""}]


def test_unit_failure_joined_to_the_checks_passing_result() -> None:
    units = "● openibd.service loaded failed failed openibd - configure Mellanox devices\n1 loaded units listed.\n"
    [r] = [x for x in grade_text("ib.hca", {"ibstat": IBSTAT_ACTIVE, "systemd-units": units}) if x.check == "ib.hca"]
    [own] = grade_text("ib.hca", {"ibstat": IBSTAT_ACTIVE})
    assert own.status is Status.PASS and own.summary
    # the unit's finding first, then what ibstat showed; the unit's remedy kept
    assert r.summary == ("openibd.service (openibd - configure Mellanox devices) failed: the InfiniBand/RDMA driver "
                         f"stack (HCA modules, GPUDirect RDMA) not served; {own.summary}")
    assert r.remedy.startswith("the HCA driver stack is not (fully) loaded")
    assert r.facts["units"] == [{"unit": "openibd.service", "active": "failed", "sub": "failed", "result": ""}]
    assert r.facts["compute_active"] == 1


def test_running_owned_units_alone_are_one_pass() -> None:
    text = ("  UNIT LOAD ACTIVE SUB DESCRIPTION\n"
            "  nvidia-persistenced.service loaded active running NVIDIA Persistence Daemon\n"
            "  nvidia-dcgm.service loaded active running NVIDIA DCGM service\n"
            "2 loaded units listed.\n")
    [r] = grade_text("gpu.driver", {"systemd-units": text})
    assert r.status is Status.PASS
    assert r.summary == "nvidia-persistenced.service active (running); nvidia-dcgm.service active (running)"
    assert [u["unit"] for u in r.facts["units"]] == ["nvidia-persistenced.service", "nvidia-dcgm.service"]


def test_unit_failure_stands_alone_where_the_checks_own_tool_gave_nothing() -> None:
    """`preflight run` on a node without ibstat: ib.hca's own result is a SKIP; the failed openibd
    unit is the result, not joined to that SKIP."""
    units = "● openibd.service loaded failed failed openibd - configure Mellanox devices\n1 loaded units listed.\n"
    [skip] = run_mode("ib.hca", {})
    assert skip.status is Status.SKIP
    [r] = run_mode("ib.hca", {"systemd-units": units})
    assert r.status is Status.FAIL and codes(r) == ["ib.hca/unit-failed"]
    assert skip.summary not in r.summary


def test_owned_unit_journal_evidence_leads_with_systemds_failure_line() -> None:
    text = ("Dec 05 10:00:02 gpu01 chronyd[812]: Fatal error : Could not open configuration file\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: chronyd.service: Failed with result 'exit-code'.\n")
    r = by_check(analyze_text(text))["node.clock"]
    assert r.evidence[:2] == ["Dec 05 10:00:02 gpu01 systemd[1]: chronyd.service: Failed with result 'exit-code'.",
                              "Dec 05 10:00:02 gpu01 chronyd[812]: Fatal error : Could not open configuration file"]
    assert r.summary.startswith("chronyd.service failed (result exit-code): clock synchronisation not served")


def test_rdma_units_owned_by_their_unit_names() -> None:
    text = ("  UNIT LOAD ACTIVE SUB DESCRIPTION\n"
            "● rdma-load-modules@infiniband.service loaded failed failed Load RDMA modules from "
            "/etc/rdma/modules/infiniband.conf\n"
            "● nv_peer_mem.service loaded failed failed LSB: Activates/Deactivates nv_peer_mem\n"
            "2 loaded units listed.\n")
    got = by_check(analyze_text(text))
    assert "node.units" not in got
    assert [u["unit"] for u in got["ib.hca"].facts["units"]] == ["rdma-load-modules@infiniband.service",
                                                                  "nv_peer_mem.service"]


def test_fabric_manager_unit_owned_by_fabric_manager() -> None:
    from preflight.checks.units import owner, unowned_failed
    from tests.conftest import facts_of

    u = facts_of("systemd-units", fixture_text("systemd-units/failed-legacy-legend.txt"))
    assert owner(u, u.units["nvidia-fabricmanager.service"]) == "fabric.manager"  # type: ignore[attr-defined]
    assert [x.unit for x in unowned_failed(u)] == ["rasdaemon.service"]  # type: ignore[arg-type]


def test_unowned_unit_journal_says_how_it_ended() -> None:
    text = ("Dec 05 10:00:02 gpu01 postfix[900]: fatal: bind 0.0.0.0 port 25: Address already in use\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: postfix.service: Failed with result 'exit-code'.\n")
    r = by_check(analyze_text(text))["node.units"]
    assert r.summary == "postfix.service failed (result exit-code)"
    assert r.evidence == ["Dec 05 10:00:02 gpu01 systemd[1]: postfix.service: Failed with result 'exit-code'.",
                          "Dec 05 10:00:02 gpu01 postfix[900]: fatal: bind 0.0.0.0 port 25: Address already in use"]
    assert r.facts["units"] == [{"unit": "postfix.service", "active": "failed", "result": "exit-code"}]


def test_unowned_failed_units_named_four_in_the_summary() -> None:
    names = ["rasdaemon", "postfix", "cups", "smartd", "kdump"]
    text = ("  UNIT LOAD ACTIVE SUB DESCRIPTION\n"
            + "".join(f"● {n}.service loaded failed failed {n} daemon\n" for n in names) + "5 loaded units listed.\n")
    [r] = grade_text("node.units", {"systemd-units": text})
    assert r.summary == ("rasdaemon.service (rasdaemon daemon) failed; postfix.service (postfix daemon) failed; "
                         "cups.service (cups daemon) failed; smartd.service (smartd daemon) failed (+1 more)")
    assert len(r.evidence) == 5
    assert [u["unit"] for u in r.facts["units"]] == [f"{n}.service" for n in names]


def test_node_units_without_unit_facts_says_nothing() -> None:
    assert grade_text("node.units", {}) == []
    assert grade_text("node.units", {"systemd-units": "System has not been booted with systemd as init system "
                                                      "(PID 1). Can't operate.\n"}) == []

"""systemd-units: list-units tables, `systemctl status` of any unit, systemd's journal lines about units."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import systemd
from preflight.parsers.systemd import Units, detect_units, unit_transition
from tests.conftest import facts_of, fixture_text


def units(text: str) -> Units:
    return facts_of("systemd-units", text)  # type: ignore[return-value]


def detects(text: str) -> bool:
    return detect_units(Doc.join(frame(text).docs))


FAILED_NAMES = ["chronyd.service", "nvidia-dcgm.service", "nvidia-fabricmanager.service",
                "nvidia-persistenced.service", "openibd.service", "rasdaemon.service"]


@pytest.mark.parametrize("name", ["failed-legacy-legend.txt", "failed-arrow-legend.txt"])
def test_failed_listing_every_row(name: str) -> None:
    u = units(fixture_text("systemd-units/" + name))
    assert u.listing and u.listed == 6
    assert sorted(u.units) == FAILED_NAMES
    assert all(x.active == "failed" and x.sub == "failed" and x.load == "loaded" and x.form == "list"
               for x in u.units.values())
    assert u.descriptions["openibd.service"] == "openibd - configure Mellanox devices"
    assert u.units["chronyd.service"].lines == ["● chronyd.service              loaded failed failed NTP client/server"]


def test_listing_plain_no_legend_and_other_states() -> None:
    text = ("$ systemctl list-units --state=failed --plain --no-legend\n"
            "openibd.service loaded failed failed openibd - configure Mellanox devices\n"
            "rdma-load-modules@infiniband.service loaded failed failed Load RDMA modules from /etc/rdma/modules/infiniband.conf\n")
    assert detects(text)
    u = units(text)
    assert sorted(u.units) == ["openibd.service", "rdma-load-modules@infiniband.service"]
    assert u.listed is None


def test_listing_without_utf8_circle_and_masked_row() -> None:
    text = ("  UNIT                 LOAD   ACTIVE SUB    DESCRIPTION\n"
            "* chronyd.service      loaded failed failed NTP client/server\n"
            "  ntpd.service         masked inactive dead ntpd.service\n\n"
            "2 loaded units listed.\n")
    u = units(text)
    assert u.units["chronyd.service"].active == "failed"
    assert u.units["ntpd.service"].load == "masked" and u.units["ntpd.service"].active == "inactive"
    assert [x.unit for x in u.failed()] == ["chronyd.service"]


def test_empty_failed_listing() -> None:
    u = units("$ systemctl --failed\n  UNIT LOAD ACTIVE SUB DESCRIPTION\n0 loaded units listed.\n")
    assert u.listing and u.listed == 0 and not u.units


def test_listing_under_pdsh() -> None:
    text = ("gpu07: ● openibd.service  loaded failed failed openibd - configure Mellanox devices\n"
            "gpu07: \n"
            "gpu07: 1 loaded units listed.\n")
    assert detects(text)
    assert units(text).units["openibd.service"].active == "failed"


def test_status_of_a_failed_forking_unit() -> None:
    u = units(fixture_text("systemd-units/persistenced-failed-status.txt"))
    p = u.units["nvidia-persistenced.service"]
    assert (p.form, p.load, p.active, p.result, p.exec_status) == ("status", "loaded", "failed", "exit-code", 1)
    assert p.lines[0].startswith("Active: failed")
    assert any("Failed to query NVIDIA devices" in ln for ln in p.lines)  # the daemon's own reason
    assert u.descriptions["nvidia-persistenced.service"] == "NVIDIA Persistence Daemon"


def test_status_el7_wording() -> None:
    u = units(fixture_text("systemd-units/chronyd-failed-status-el7.txt"))
    c = u.units["chronyd.service"]
    assert c.active == "failed" and c.result == "exit-code"
    assert any("entered failed state" in ln for ln in c.lines)


@pytest.mark.parametrize("name,unit,sub", [("persistenced-running-status.txt", "nvidia-persistenced.service", "running"),
                                           ("chronyd-running-status-el7.txt", "chronyd.service", "running"),
                                           ("openibd-exited-status.txt", "openibd.service", "exited")])
def test_status_running(name: str, unit: str, sub: str) -> None:
    u = units(fixture_text("systemd-units/" + name))
    assert u.units[unit].active == "active" and u.units[unit].sub == sub
    assert not u.failed()
    assert u.units[unit].lines[0].startswith("Active: active")


def test_unit_journal_joins_description_to_the_unit() -> None:
    u = units(fixture_text("systemd-units/openibd-failed-journal.txt"))
    o = u.units["openibd.service"]
    assert o.form == "journal" and o.active == "failed" and o.result == "exit-code"
    assert u.descriptions["openibd.service"] == "openibd - configure Mellanox devices"
    assert "Loading HCA driver and Access Layer:[FAILED]" in o.lines[0]
    assert o.lines[-1].endswith("Failed to start openibd - configure Mellanox devices.")
    # the unit that needed it is another unit
    assert u.units["NVIDIA Peer Memory Client"].result == "dependency"


def test_journal_restart_loop_start_limit() -> None:
    text = ("Dec 05 10:00:01 gpu01 systemd[1]: nvidia-dcgm.service: Main process exited, code=killed, status=6/ABRT\n"
            "Dec 05 10:00:01 gpu01 systemd[1]: nvidia-dcgm.service: Failed with result 'signal'.\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: nvidia-dcgm.service: Scheduled restart job, restart counter is at 5.\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: nvidia-dcgm.service: Start request repeated too quickly.\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: nvidia-dcgm.service: Failed with result 'start-limit-hit'.\n"
            "Dec 05 10:00:02 gpu01 systemd[1]: Failed to start NVIDIA DCGM service.\n")
    assert detects(text)
    d = units(text).units["nvidia-dcgm.service"]
    assert d.active == "failed" and d.result == "start-limit-hit"


def test_journal_recovered_unit_is_active() -> None:
    text = ("Dec 05 10:00:01 gpu01 systemd[1]: chronyd.service: Failed with result 'exit-code'.\n"
            "Dec 05 10:00:05 gpu01 systemd[1]: Starting NTP client/server...\n"
            "Dec 05 10:00:05 gpu01 systemd[1]: Started NTP client/server.\n")
    c = units(text).units["chronyd.service"]
    assert c.active == "active"


@pytest.mark.parametrize("msg,unit,state", [
    ("Failed to start NVIDIA Persistence Daemon.", "NVIDIA Persistence Daemon", ("failed", "failed", "")),
    ("openibd.service: Failed with result 'exit-code'.", "openibd.service", ("failed", "failed", "exit-code")),
    ("Dependency failed for NVIDIA Peer Memory Client.", "NVIDIA Peer Memory Client", ("failed", "failed", "dependency")),
    ("chronyd.service: Start request repeated too quickly.", "chronyd.service", ("failed", "failed", "start-limit-hit")),
    ("start request repeated too quickly for chronyd.service", "chronyd.service", ("failed", "failed", "start-limit-hit")),
    ("Unit ntpd.service entered failed state.", "ntpd.service", ("failed", "failed", "")),
    ("ntpd.service failed.", "ntpd.service", ("failed", "failed", "")),
    ("chronyd.service: control process exited, code=exited status=1", "chronyd.service",
     ("failed", "failed", "exit-code")),
    ("openibd.service: Main process exited, code=killed, status=9/KILL", "openibd.service",
     ("failed", "failed", "signal")),
    ("Finished openibd - configure Mellanox devices.", "openibd - configure Mellanox devices",
     ("active", "exited", "success")),
])
def test_unit_transition_every_wording(msg: str, unit: str, state: tuple[str, str, str]) -> None:
    t = unit_transition(msg)
    assert t is not None and t[0] == unit and tuple(t[1]) == state


def test_transition_exit_zero_decides_nothing() -> None:
    assert unit_transition("chronyd.service: Main process exited, code=exited, status=0/SUCCESS") is None
    assert unit_transition("Job for x.service failed because the control process exited with error code.") is None


def test_fm_transition_stays_fabric_manager_only() -> None:
    assert systemd.transition("openibd.service: Failed with result 'exit-code'.") is None
    t = systemd.transition("nvidia-fabricmanager.service: Failed with result 'exit-code'.")
    assert t is not None and t.active == "failed"


def test_fm_service_reads_its_row_of_a_failed_listing() -> None:
    text = fixture_text("systemd-units/failed-legacy-legend.txt")
    assert systemd.detect(Doc.join(frame(text).docs))
    svc = facts_of("fm-service", text)
    assert (svc.form, svc.active, svc.sub) == ("list", "failed", "failed")  # type: ignore[attr-defined]


def test_not_systemd() -> None:
    assert not detects("")
    assert not detects("hello world\nnothing here\n")
    # a healthy journal (only Started lines) is not a unit failure to grade
    assert not detects("Dec 05 10:00:05 gpu01 systemd[1]: Started Session 3 of user root.\n")
    u = units("System has not been booted with systemd as init system (PID 1). Can't operate.\n")
    assert u.error and not u.units


def test_garbage_is_no_traceback() -> None:
    u = units("● \n   Loaded:\n   Active:\nUNIT LOAD\n12 loaded units listed.\n\x00\x01")
    assert isinstance(u, Units)


def test_journal_line_under_a_localised_month_keeps_its_message() -> None:
    # journalctl under a German locale: the framing does not take "Dez" for a month, the journal
    # prefix stays on the line and systemd's message is read from behind it
    text = ("Dez 05 10:00:01 gpu01 systemd[1]: chronyd.service: Failed with result 'exit-code'.\n"
            "Dez 05 10:00:02 gpu01 chronyd[812]: Fatal error : Could not open configuration file\n")
    assert detects(text)
    u = units(text)
    c = u.units["chronyd.service"]
    assert (c.form, c.active, c.result) == ("journal", "failed", "exit-code")
    assert [j.message for j in c.journal] == ["chronyd.service: Failed with result 'exit-code'.",
                                              "Fatal error : Could not open configuration file"]
    assert c.journal[0].time_text == "Dez 05 10:00:01"

"""A ping command shown in a transcript whose run printed nothing (or only the shell's `Killed`,
or the `^C` of an interrupt) before the next prompt is a run with no result: net.mtu/no-result,
ERROR, both in `preflight analyze` and in the ping grader reading the whole text, never dropped
for a PASS on the runs beside it. And a ping's options are read through the framings around its
command line (pdsh and ssh quotes, sudo, timeout, srun), so `-M do` inside pdsh quotes counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.model import Result, Status
from preflight.parsers import ping
from tests.conftest import grade_text
from tests.test_analyze_ping_split import JUMBO_CMD, PROMPT, SMALL_CMD, SMALL_RUN, _codes, _mtu

JUMBO_RUN = [ln.replace("56(84)", "8972(9000)").replace("64 bytes", "8980 bytes") for ln in SMALL_RUN]
MARKS = {"nothing": "", "killed": "Killed\n", "interrupt": "^C\n"}


def _grader(text: str) -> list[Result]:
    return grade_text("net.mtu", {"ping": text})


def _assert_no_result(rs: list[Result]) -> None:
    assert rs, "no net.mtu result at all"
    for r in rs:
        assert r.status == Status.ERROR, (r.status, r.summary)
        assert "net.mtu/no-result" in _codes(r), (_codes(r), r.summary)
        assert r.summary == "no usable ping result for gpu-c032", r.summary


def _texts(mark: str) -> dict[str, str]:
    small = f"{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + "\n"
    jumbo = f"{PROMPT}{JUMBO_CMD}\n{mark}"
    return {"before": jumbo + small + PROMPT + "\n", "last": small + jumbo, "alone": jumbo + PROMPT + "\n"}


@pytest.mark.parametrize("where", ["before", "last", "alone"])
@pytest.mark.parametrize("mark", sorted(MARKS))
def test_a_jumbo_ping_that_printed_nothing_is_no_result_in_analyze(tmp_path: Path, mark: str, where: str):
    _assert_no_result(_mtu(tmp_path, _texts(MARKS[mark])[where]))


@pytest.mark.parametrize("where", ["before", "last", "alone"])
@pytest.mark.parametrize("mark", sorted(MARKS))
def test_a_jumbo_ping_that_printed_nothing_is_no_result_in_the_grader(mark: str, where: str):
    _assert_no_result(_grader(_texts(MARKS[mark])[where]))


def test_the_runs_no_result_names_its_target_and_size(tmp_path: Path):
    rs = _mtu(tmp_path, _texts("Killed\n")["before"])
    peers = rs[0].facts["peers"]
    assert [(p["peer"], p["jumbo_size"], p["outcome"]) for p in peers] == [("gpu-c032", 8972, "unknown")]


def test_a_finished_jumbo_run_still_passes(tmp_path: Path):
    text = (f"{PROMPT}{JUMBO_CMD}\n" + "\n".join(JUMBO_RUN) + f"\n{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + "\n")
    assert [r.status for r in _mtu(tmp_path, text)] == [Status.PASS]
    assert [r.status for r in _grader(text)] == [Status.PASS]


def test_an_echo_of_a_ping_command_that_printed_nothing_is_no_run(tmp_path: Path):
    text = (f"{PROMPT}echo '{JUMBO_CMD}'\n{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + "\n")
    rs = _mtu(tmp_path, text)  # the 56-byte run alone, as before: not an error
    assert [(r.status, _codes(r)) for r in rs] == [(Status.PASS, [])], [(r.status, r.summary) for r in rs]


# ---------------------------------------------------------------------------------------------
# -M do through the framings around the ping

FRAMED = {
    "pdsh single quotes": ("pdsh -w h 'ping -M do -s 56 -c 3 gpu-c032'", "h: "),
    "pdsh double quotes": ('pdsh -w h "ping -M do -s 56 -c 3 gpu-c032"', "h: "),
    "ssh quotes": ("ssh h 'sudo timeout 5 ping -M do -s 56 -c 3 gpu-c032'", ""),
    "clush quotes": ("clush -w h 'ping -M do -s 56 -c 3 gpu-c032'", "h: "),
    "sh -c": ("sh -c 'ping -M do -s 56 -c 3 gpu-c032 2>&1'", ""),
}


def _run(command: str, prefix: str) -> str:
    return f"[ops@login01 ~]$ {command}\n" + "".join(f"{prefix}{ln}\n" for ln in SMALL_RUN if ln)


@pytest.mark.parametrize("name", sorted(FRAMED))
def test_df_is_read_through_the_framing(tmp_path: Path, name: str):
    command, prefix = FRAMED[name]
    assert ping.df_of(command) is True
    srun = [(r.status, r.summary) for r in _mtu(tmp_path, _run("srun -l -N1 ping -M do -s 56 -c 3 gpu-c032", "0: "),
                                                 "srun.txt")]
    mine = [(r.status, r.summary) for r in _mtu(tmp_path, _run(command, prefix))]
    assert srun and srun[0][0] != Status.SKIP, srun
    assert mine == srun


@pytest.mark.parametrize("command", ["echo 'ping -M do -s 8972 gpu-c032'", "ping -s 56 -c 3 gpu-c032",
                                     "pdsh -w h 'ping -s 56 -c 3 gpu-c032'", "grep -c 'ping -M do' notes.txt"])
def test_no_df_where_the_ping_does_not_forbid_fragmenting(command: str):
    assert ping.df_of(command) in (False, None)
    if command.startswith(("echo", "grep")):
        assert ping.df_of(command) is None


def test_the_target_of_a_quoted_ping_has_no_quote():
    run = ping.parse_runs([], "pdsh -w h 'timeout -s KILL 5 ping -M do -s 8972 -c 3 gpu-c032'")
    assert [(r.target, r.size, r.df) for r in run] == [("gpu-c032", 8972, True)]


@pytest.mark.parametrize("report", ["srun: error: gpu-c031: task 0: Killed",
                                    "slurmstepd: error: *** STEP 4242.0 ON gpu-c031 CANCELLED AT 2026-12-06T02:10:11 "
                                    "DUE TO TIME LIMIT ***",
                                    "pdsh@login01: gpu-c031: ssh exited with exit code 137"])
def test_a_launchers_report_of_the_kill_is_no_output_of_the_ping(tmp_path: Path, report: str):
    launcher = "pdsh -w gpu-c031" if report.startswith("pdsh") else "srun -l -N1"
    jumbo = f"{launcher} '{JUMBO_CMD}'" if launcher.startswith("pdsh") else f"{launcher} {JUMBO_CMD}"
    text = (f"[ops@login01 ~]$ {jumbo}\n{report}\n[ops@login01 ~]$ srun -l -N1 {SMALL_CMD}\n"
            + "".join(f"0: {ln}\n" for ln in SMALL_RUN if ln))
    _assert_no_result(_mtu(tmp_path, text))
    _assert_no_result(_grader(text))

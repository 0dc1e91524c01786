"""analyze keeps a command's output that stops short: a transcript cut at its shell prompts where
one ping run printed its PING header but was killed before its statistics is graded as that run
with no result (net.mtu/no-result, ERROR), as the ping grader does on the same text read whole,
never dropped for a PASS on the runs that did finish. Plain prompts, pdsh and srun -l framing."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight import analyze as an
from preflight import registry
from preflight.model import Result, Status
from tests.conftest import grade_text

FIXTURES = Path(__file__).parent / "fixtures"

PROMPT = "[ops@gpu-c031 ~]$ "
JUMBO_CMD = "timeout -s KILL 5 ping -M do -s 8972 -c 3 gpu-c032"
JUMBO_HEAD = "PING gpu-c032 (10.45.3.32) 8972(9000) bytes of data."
SMALL_CMD = "ping -M do -s 56 -c 3 gpu-c032"
SMALL_RUN = ["PING gpu-c032 (10.45.3.32) 56(84) bytes of data.",
             *(f"64 bytes from gpu-c032 (10.45.3.32): icmp_seq={i} ttl=64 time=0.{i}04 ms" for i in (1, 2, 3)),
             "",
             "--- gpu-c032 ping statistics ---",
             "3 packets transmitted, 3 received, 0% packet loss, time 2031ms",
             "rtt min/avg/max/mdev = 0.104/0.204/0.304/0.082 ms"]
JUMBO_REPLIES = [f"8980 bytes from gpu-c032 (10.45.3.32): icmp_seq={i} ttl=64 time=0.31{i} ms" for i in (1, 2)]


def _mtu(tmp_path: Path, text: str, name: str = "ping.txt") -> list[Result]:
    f = tmp_path / name
    f.write_text(text)
    return [r for r in an.analyze(registry.load(), [f]) if r.check == "net.mtu"]


def _codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def _assert_no_result(rs: list[Result], node: str | None = None) -> None:
    assert rs, "no net.mtu result at all"
    if node is not None:
        rs = [r for r in rs if r.node == node]
        assert rs, f"no net.mtu result for {node}"
    for r in rs:
        assert r.status == Status.ERROR, (r.status, r.summary)
        assert "net.mtu/no-result" in _codes(r), (_codes(r), r.summary)


def test_the_proof_transcript_is_an_error_not_a_pass():
    rs = [r for r in an.analyze(registry.load(), [FIXTURES / "ping" / "proof_net_mtu_no_result.txt"])
          if r.check == "net.mtu"]
    _assert_no_result(rs)


def test_header_only_run_then_a_prompt(tmp_path: Path):
    text = f"{PROMPT}{JUMBO_CMD}\n{JUMBO_HEAD}\n{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + f"\n{PROMPT}\n"
    _assert_no_result(_mtu(tmp_path, text))


def test_header_only_run_last_in_the_paste(tmp_path: Path):
    text = f"{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + f"\n{PROMPT}{JUMBO_CMD}\n{JUMBO_HEAD}\n"
    _assert_no_result(_mtu(tmp_path, text))


def test_header_only_run_alone_under_its_prompt(tmp_path: Path):
    _assert_no_result(_mtu(tmp_path, f"{PROMPT}{JUMBO_CMD}\n{JUMBO_HEAD}\n{PROMPT}\n"))


def _as_the_grader_reads_it(text: str) -> list[tuple[Status, str]]:
    """What the ping grader says on the whole text given as the ping input (no classification)."""
    return [(r.status, r.summary) for r in grade_text("net.mtu", {"ping": text})]


def test_header_and_some_replies_without_statistics(tmp_path: Path):
    text = (f"{PROMPT}{JUMBO_CMD}\n{JUMBO_HEAD}\n" + "\n".join(JUMBO_REPLIES) + f"\n{PROMPT}{SMALL_CMD}\n"
            + "\n".join(SMALL_RUN) + "\n")
    rs = _mtu(tmp_path, text)
    assert [(r.status, r.summary) for r in rs] == _as_the_grader_reads_it(text)


@pytest.mark.parametrize("variant", ["header", "replies"])
def test_analyze_grades_a_cut_run_as_the_ping_grader_does(tmp_path: Path, variant: str):
    jumbo = [JUMBO_HEAD] + (JUMBO_REPLIES if variant == "replies" else [])
    text = f"{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + f"\n{PROMPT}{JUMBO_CMD}\n" + "\n".join(jumbo) + "\n"
    rs = _mtu(tmp_path, text)
    assert [(r.status, r.summary) for r in rs] == _as_the_grader_reads_it(text)


@pytest.mark.parametrize("cut", ["header", "replies"])
def test_the_same_inside_pdsh_framing(tmp_path: Path, cut: str):
    hosts = ["gpu-c031", "gpu-c033"]
    jumbo = [JUMBO_HEAD] + (JUMBO_REPLIES if cut == "replies" else [])
    text = f"[ops@login01 ~]$ pdsh -w gpu-c[031,033] '{JUMBO_CMD}'\n"
    text += "".join(f"{h}: {ln}\n" for h in hosts for ln in jumbo)
    text += f"[ops@login01 ~]$ pdsh -w gpu-c[031,033] '{SMALL_CMD}'\n"
    text += "".join(f"{h}: {ln}\n" for h in hosts for ln in SMALL_RUN if ln)
    rs = _mtu(tmp_path, text)
    assert {r.node for r in rs} == set(hosts), [(r.node, r.status) for r in rs]
    for h in hosts:
        if cut == "header":
            _assert_no_result(rs, h)
        else:  # each node as the ping grader reads that node's lines
            mine = [ln[len(h) + 2:] for ln in text.splitlines() if ln.startswith(f"{h}: ")]
            body = (f"{PROMPT}{JUMBO_CMD}\n" + "\n".join(mine[:len(jumbo)]) + f"\n{PROMPT}{SMALL_CMD}\n"
                    + "\n".join(mine[len(jumbo):]) + "\n")
            assert [(r.status, r.summary) for r in rs if r.node == h] == _as_the_grader_reads_it(body)


def test_the_same_inside_srun_label_framing(tmp_path: Path):
    text = f"[ops@login01 ~]$ srun -l -N1 {JUMBO_CMD}\n0: {JUMBO_HEAD}\n"
    text += f"[ops@login01 ~]$ srun -l -N1 {SMALL_CMD}\n" + "".join(f"0: {ln}\n" for ln in SMALL_RUN if ln)
    _assert_no_result(_mtu(tmp_path, text))


def test_finished_runs_still_pass(tmp_path: Path):
    jumbo = [ln.replace("56(84)", "8972(9000)").replace("64 bytes", "8980 bytes") for ln in SMALL_RUN]
    text = f"{PROMPT}{JUMBO_CMD}\n" + "\n".join(jumbo) + f"\n{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + "\n"
    rs = _mtu(tmp_path, text)
    assert [r.status for r in rs] == [Status.PASS], [(r.status, r.summary) for r in rs]


def test_a_header_echoed_by_another_command_is_not_a_ping_run(tmp_path: Path):
    text = (f"{PROMPT}echo '{JUMBO_HEAD}'\n{JUMBO_HEAD}\n{PROMPT}{SMALL_CMD}\n" + "\n".join(SMALL_RUN) + "\n")
    rs = _mtu(tmp_path, text)  # graded as the finished 56-byte run alone, as before
    assert [(r.status, _codes(r)) for r in rs] == [(Status.PASS, [])], [(r.status, r.summary) for r in rs]

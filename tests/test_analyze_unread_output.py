"""A document under the command line of a known program (ethtool, nvidia-smi, ip ...) that no
format recognises, even read as cut short, is said: `preflight analyze` reports that the command's
output was not read (analyze.unrecognised/not-recognised, SKIP, naming the command), beside the
verdicts of the outputs it did read, which stay as they were."""

from __future__ import annotations

from pathlib import Path

from preflight import analyze as an
from preflight import registry
from preflight.grading import decide
from preflight.model import Result, Status
from tests.test_analyze_ping_split import PROMPT, SMALL_RUN

JUMBO_RUN = [ln.replace("56(84)", "8972(9000)").replace("64 bytes", "8980 bytes") for ln in SMALL_RUN]
PINGS = (f"{PROMPT}ping -M do -s 8972 -c 3 gpu-c032\n" + "\n".join(JUMBO_RUN)
         + f"\n{PROMPT}ping -M do -s 56 -c 3 gpu-c032\n" + "\n".join(SMALL_RUN) + "\n")
CUT_ETHTOOL = f"{PROMPT}ethtool -S ens1f0np0\nNIC statistics:\n"


def _analyze(tmp_path: Path, text: str) -> list[Result]:
    f = tmp_path / "session.txt"
    f.write_text(text)
    return an.analyze(registry.load(), [f])


def _unread(rs: list[Result]) -> list[Result]:
    return [r for r in rs if r.check == an.UNKNOWN_CHECK]


def test_a_cut_ethtool_block_is_said_not_read(tmp_path: Path):
    rs = _analyze(tmp_path, PINGS + CUT_ETHTOOL)
    notes = _unread(rs)
    assert len(notes) == 1, [(r.check, r.status, r.summary) for r in rs]
    note = notes[0]
    assert note.status == Status.SKIP
    assert "analyze.unrecognised/not-recognised" in note.facts.get("codes", [])
    assert "`ethtool -S ens1f0np0`" in note.summary and "not read" in note.summary, note.summary
    assert any("NIC statistics:" in e for e in note.evidence), note.evidence


def test_the_verdicts_of_what_was_read_stay(tmp_path: Path):
    alone = _analyze(tmp_path, PINGS)
    both = _analyze(tmp_path, CUT_ETHTOOL + PINGS)
    assert [(r.check, r.status, r.summary) for r in both if r.check != an.UNKNOWN_CHECK] == \
        [(r.check, r.status, r.summary) for r in alone]
    assert decide(both).verdict == decide(alone).verdict == "GO"


def test_each_unread_command_is_named_once(tmp_path: Path):
    text = CUT_ETHTOOL + PINGS + CUT_ETHTOOL + f"{PROMPT}ethtool ens1f1np1\nSettings for ens1f1np1:\n"
    summaries = sorted(r.summary for r in _unread(_analyze(tmp_path, text)))
    assert len(summaries) == 2, summaries
    assert "`ethtool -S ens1f0np0`" in summaries[0] and "`ethtool ens1f1np1`" in summaries[1], summaries


def test_no_note_for_an_unknown_program_or_a_read_output(tmp_path: Path):
    text = PINGS + f"{PROMPT}uptime\n 02:10:11 up 3 days,  4:02,  1 user,  load average: 0.10, 0.20, 0.30\n"
    assert _unread(_analyze(tmp_path, text)) == []


def test_a_file_with_nothing_read_keeps_its_one_result(tmp_path: Path):
    rs = _analyze(tmp_path, CUT_ETHTOOL)
    assert [(r.check, r.status) for r in rs] == [(an.UNKNOWN_CHECK, Status.SKIP)]


def test_a_filter_naming_a_program_is_not_its_output(tmp_path: Path):
    text = PINGS + f"{PROMPT}lsmod | grep nvidia\nnvidia_uvm           1531904  0\nnvidia              56717312  1 nvidia_uvm\n"
    assert _unread(_analyze(tmp_path, text)) == []


RESET_REFUSED = ("The following GPUs could not be reset:\n"
                 "  GPU 00000000:1B:00.0: In use by another client\n")


def test_nvidia_smis_acknowledgement_of_a_setting_is_read_not_said(tmp_path: Path):
    """`nvidia-smi -pm 0` answers one line per GPU: read, no fault and no unread note; the reset
    refused after it is still graded."""
    text = (f"{PROMPT}sudo nvidia-smi -i 0 -pm 0\nDisabled persistence mode for GPU 00000000:1B:00.0.\n\n"
            f"{PROMPT}sudo nvidia-smi -i 0 -r\n{RESET_REFUSED}")
    rs = _analyze(tmp_path, text)
    assert _unread(rs) == [], [r.summary for r in _unread(rs)]
    assert [r.check for r in rs if r.status == Status.FAIL] == ["gpu.health"], [(r.check, r.status) for r in rs]


def test_a_refusal_of_a_setting_is_still_said(tmp_path: Path):
    text = (f"{PROMPT}nvidia-smi -i 0 -pm 1\nUnable to set persistence mode for GPU 00000000:1B:00.0: "
            f"Insufficient Permissions\nTerminating early due to previous errors.\n"
            f"{PROMPT}sudo nvidia-smi -i 0 -r\n{RESET_REFUSED}")
    notes = _unread(_analyze(tmp_path, text))
    assert len(notes) == 1 and "`nvidia-smi -i 0 -pm 1`" in notes[0].summary, [r.summary for r in notes]


def test_which_lines_are_acknowledgements():
    from preflight.parsers.nvsmi_settings import acknowledged

    assert acknowledged(["Enabled persistence mode for GPU 00000000:1B:00.0.", "All done."])
    assert acknowledged(["Enabled Legacy persistence mode for GPU 00000000:1B:00.0.", ""])
    assert acknowledged(["Power limit for GPU 00000000:1B:00.0 was set to 500.00 W from 700.00 W.", "All done."])
    assert acknowledged(["GPU 00000000:1B:00.0 was successfully reset.", "All done."])
    assert acknowledged(["Disabled ECC support for GPU 00000000:1B:00.0.", "All done."])
    assert acknowledged(['Applications clocks set to "(MEM 2619, SM 1980)" for GPU 00000000:1B:00.0', "All done."])
    assert acknowledged(["Set compute mode to EXCLUSIVE_PROCESS for GPU 00000000:1B:00.0."])
    assert not acknowledged([]) and not acknowledged(["", "  "])
    assert not acknowledged(["Disabled persistence mode for GPU 00000000:1B:00.0.",
                             "Unable to set persistence mode for GPU 00000001:1B:00.0: Insufficient Permissions"])
    assert not acknowledged(["All done. and more"])

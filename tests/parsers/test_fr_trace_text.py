"""preflight.parsers.flight_recorder: the text `fr_trace` / `torchfrtrace` prints, every version."""

from __future__ import annotations

import pytest

from preflight.framing import Doc
from preflight.parsers import flight_recorder as fr
from tests.conftest import fixture_text


def findings(rel: str) -> list[fr.FRTraceFinding]:
    return fr.parse_fr_trace_text(fixture_text(f"flight-recorder/{rel}"))


def test_colon_sequence_number_wording() -> None:
    [x] = findings("fr_trace_colon_sequence_missing_4to7.txt")
    assert (x.kind, x.seq, x.record_id, x.op, x.group) == ("missing", 20488, 20487, "all_reduce", "0:default_pg")
    assert (x.missing_ranks, x.expected_ranks, x.world_size, x.state) == ([4, 5, 6, 7], list(range(8)), 8, "scheduled")
    assert x.lines[0] == "Not all ranks joining collective: sequence number: 20488" and len(x.lines) == 10


def test_comma_sequence_number_wording() -> None:
    [x] = fr.parse_fr_trace_text("Not all ranks joining collective, sequence number: 4\nmissing ranks: {1}\n")
    assert (x.kind, x.seq, x.missing_ranks) == ("missing", 4, [1])


def test_at_entry_wording_with_a_count_of_expected_ranks() -> None:
    [x] = findings("torchfrtrace_at_entry_missing_rank2.txt")
    assert (x.kind, x.seq, x.record_id, x.op, x.missing_ranks) == ("missing", 7, 6, "broadcast", [2])
    assert (x.expected_ranks, x.world_size) == ([], 4)


def test_oldest_print_wording_on_one_line() -> None:
    line = ("Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce  Missing ranks are {1, 3}"
            "  [[3, 4]] [[3, 4]] 4 scheduled ")
    [x] = fr.parse_fr_trace_text(line)
    assert (x.kind, x.seq, x.group, x.op, x.missing_ranks) == ("missing", None, "0:default_pg", "all_reduce", [1, 3])
    [y] = fr.parse_fr_trace_text("Not all ranks joining collective for group 1:tp collective nccl:barrier")
    assert (y.op, y.missing_ranks) == ("barrier", [])


def test_state_mismatch_culprit() -> None:
    [x] = findings("fr_trace_has_errors_state_mismatch.txt")
    assert (x.kind, x.seq, x.record_id, x.op, x.group, x.state) == ("errors", 12, 11, "all_gather", "1:tp", "completed")
    assert x.culprits == [(3, "COLLECTIVE_STATE_MISMATCH (Expected state: 'completed' does not match found state: "
                              "'scheduled')")]


def test_several_culprits_in_one_error_message() -> None:
    [x] = findings("fr_trace_has_errors_type_and_size.txt")
    assert [c[0] for c in x.culprits] == [1, 1]
    assert x.culprits[0][1].startswith("COLLECTIVE_TYPE_MISMATCH (Expected collective type: 'all_reduce'")
    assert x.culprits[1][1] == ("SIZE_OR_SYNTAX_MISMATCH (Expected input sizes: '[[8]]' does not match found input "
                                "sizes: '[[16]]')")


def test_old_entry_errors_with_match_state_enum() -> None:
    [x] = findings("fr_trace_old_entry_errors.txt")
    assert (x.kind, x.seq, x.record_id, x.world_size, x.culprits) == ("errors", 9, 8, 2, [(1, "COLLECTIVE_TYPE_MISMATCH")])


@pytest.mark.parametrize("line, seq, record", [
    ("Input/output mismatch in the collective sequence number: 31", 31, None),
    ("Input/output mismatch in the collective 31 at entry 30", 31, 30),
])
def test_input_output_mismatch(line: str, seq: int, record: int | None) -> None:
    [x] = fr.parse_fr_trace_text(line + "\ntotal input numel: 96\ntotal output numel: 88\n")
    assert (x.kind, x.seq, x.record_id, len(x.lines)) == ("size", seq, record, 3)


def test_undecided_and_no_errors() -> None:
    x, y = findings("fr_trace_undecided_missing_dumps.txt")
    assert (x.kind, x.missing_ranks) == ("undecided", [6, 7])
    assert (y.kind, y.seq, y.missing_ranks) == ("no_errors", None, [])
    [z] = fr.parse_fr_trace_text("AssertionError: Missing dump files from ranks {3, 9}")
    assert (z.kind, z.missing_ranks) == ("dumps_missing", [3, 9])


def test_logging_prefixes_and_noise() -> None:
    text = ("INFO:Flight Recorder:Not all ranks joining collective, sequence number: 8\n"
            "INFO:Flight Recorder:missing ranks: {0}\n"
            "unrelated: line\n"
            "expected ranks: {0, 1}\n")
    [x] = fr.parse_fr_trace_text(text)
    assert (x.seq, x.missing_ranks, x.expected_ranks, len(x.lines)) == (8, [0], [0, 1], 3)


@pytest.mark.parametrize("text", ["", "garbage\nmore", "missing ranks: {1}\n", "error msg: Culprit rank x;",
                                  "Not all ranks joining collective"])
def test_garbage(text: str) -> None:
    assert all(f.missing_ranks == [] for f in fr.parse_fr_trace_text(text))


def test_detect_every_wording_and_not_other_text() -> None:
    for rel in ("fr_trace_colon_sequence_missing_4to7.txt", "torchfrtrace_at_entry_missing_rank2.txt",
                "fr_trace_has_errors_state_mismatch.txt", "fr_trace_old_entry_errors.txt",
                "fr_trace_undecided_missing_dumps.txt"):
        assert fr.detect(Doc(fixture_text(f"flight-recorder/{rel}"))), rel
    assert not fr.detect(Doc("collective: nccl:all_reduce\nmissing ranks: {1}\n"))


def test_parse_recognises_findings_and_side_by_side() -> None:
    got = fr.parse(Doc(fixture_text("flight-recorder/torchfrtrace_at_entry_missing_rank2.txt")))
    assert got.recognised and got.side_by_side is None and got.findings[0].missing_ranks == [2]
    assert not fr.parse(Doc("nothing here\n")).recognised

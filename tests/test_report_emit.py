"""preflight.report.emit: the one output path every command hands its report to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.model import Result, Status
from preflight.report import Report
from preflight.report.emit import (
    Announce,
    ConsoleSink,
    FilesSink,
    HistorySink,
    JsonSink,
    Output,
    OutputError,
    PrometheusSink,
    choose_sinks,
    emit,
)


def _report() -> Report:
    return Report.build("node", [Result(check="gpu.xid", node="n1", status=Status.FAIL, summary="Xid 79"),
                                 Result(check="gpu.driver", node="n1", status=Status.PASS, summary="ok")])


def _kinds(sinks: list) -> list[str]:
    return [type(s).__name__ for s in sinks]


def test_flags_choose_the_sinks_in_their_order(tmp_path: Path) -> None:
    assert _kinds(choose_sinks(Output())) == ["HistorySink", "ConsoleSink", "Announce"]
    assert _kinds(choose_sinks(Output(as_json=True, write_files=True, prometheus=tmp_path / "p.prom"))) == \
        ["HistorySink", "FilesSink", "PrometheusSink", "JsonSink"]
    assert _kinds(choose_sinks(Output(as_json=True, write_files=True, announce_with_json=True))) == \
        ["HistorySink", "FilesSink", "JsonSink", "Announce"]
    assert _kinds(choose_sinks(Output(quiet=True))) == ["HistorySink", "Announce"]


def test_files_json_and_the_reports_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = _report()
    written = emit(rep, [HistorySink("off"), FilesSink(tmp_path / "r"), JsonSink(), Announce()])
    assert sorted(p.name for p in written) == ["junit.xml", "report.html", "report.json", "report.md"]
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == "NO-GO"
    assert json.loads((tmp_path / "r" / "report.json").read_text())["results"][0]["check"] == "gpu.xid"
    assert err.startswith("reports: ") and str(tmp_path / "r" / "report.json") in err


def test_a_command_brings_its_own_files_and_texts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def writer(report: Report, folder: Path) -> dict[str, Path]:
        folder.mkdir(parents=True)
        (folder / "own.txt").write_text(report.command)
        return {"own": folder / "own.txt"}

    seen: list[str] = []
    emit(_report(), [FilesSink(tmp_path / "o", writer), ConsoleSink(lambda r: seen.append(r.verdict.verdict)),
                     JsonSink(lambda r: "{\"own\": true}")])
    assert (tmp_path / "o" / "own.txt").read_text() == "node" and seen == ["NO-GO"]
    assert capsys.readouterr().out == "{\"own\": true}\n"


def test_a_folder_that_cannot_be_written_is_an_output_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="cannot write reports to"):
        emit(_report(), [FilesSink(blocker / "sub")])
    with pytest.raises(OutputError, match="cannot write"):
        emit(_report(), [PrometheusSink(blocker / "m.prom")])


def test_prometheus_sink_writes_the_report_metrics(tmp_path: Path) -> None:
    path = tmp_path / "m" / "preflight.prom"
    assert emit(_report(), [PrometheusSink(path)]) == [path]
    text = path.read_text()
    assert 'preflight_check_ok{check="gpu.xid",node="n1"} 0.0' in text
    assert 'preflight_verdict_go{command="node"} 0.0' in text


def test_history_sink_records_and_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from preflight.history.store import open_store

    db = tmp_path / "h.db"
    emit(_report(), [HistorySink(f"sqlite:///{db}")])
    with open_store(f"sqlite:///{db}") as store:
        assert [r.command for r in store.runs()] == ["node"]
    (tmp_path / "a-file").write_text("x")
    emit(_report(), [HistorySink(f"sqlite:///{tmp_path / 'a-file' / 'x.db'}")])  # a store that cannot be opened
    assert "not recorded" in capsys.readouterr().err


def test_no_reports_line_when_no_report_files_were_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--no-report: the bad-node list and a metrics textfile are where the operator put them;
    nothing is said about reports."""
    from preflight.report.emit import BadNodesSink

    out = Output(write_files=False, bad_nodes=tmp_path / "bad.txt", prometheus=tmp_path / "m.prom", history="off")
    written = emit(_report(), choose_sinks(out))
    assert sorted(p.name for p in written) == ["bad.txt", "m.prom"] and (tmp_path / "bad.txt").read_text() == "n1\n"
    assert "reports:" not in capsys.readouterr().err
    emit(_report(), [BadNodesSink(tmp_path / "b2.txt"), FilesSink(tmp_path / "r"), Announce()])
    err = capsys.readouterr().err
    assert err.startswith("reports: ") and "report.json" in err and "b2.txt" not in err


@pytest.mark.real
def test_cli_with_a_bad_node_list_and_no_reports_prints_no_reports_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    examples = Path(__file__).resolve().parent.parent / "examples" / "captures" / "faulty-node"
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_CONFIG"}
    p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(examples), "--history", "off",
                        "--bad-nodes", str(tmp_path / "bad.txt")], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1 and (tmp_path / "bad.txt").read_text() == "faulty-node\n", p.stderr
    assert "reports:" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_result_as_a_dict_is_what_asdict_makes_of_it():
    """`Result.to_dict` (written once per result into every report) gives what
    `dataclasses.asdict` gives, for the results of the example captures and odd facts."""
    import dataclasses
    from collections import namedtuple
    from datetime import datetime
    from pathlib import Path

    from preflight.analyze import analyze
    from preflight.engine import Config, load_registry
    from preflight.model import Result, Status

    root = Path(__file__).resolve().parent.parent / "examples" / "captures"
    results = analyze(load_registry([], Config()), [root / "healthy-node", root / "faulty-node"], jobs=1)
    Pair = namedtuple("Pair", "a b")
    odd = Result("x.y", "n1", Status.WARN, "s", ["e"], facts={
        "when": datetime(2026, 12, 5), "pair": Pair(1, [2, 3]), "t": (1, "a"), "nested": {"k": [{"v": 1.5}]},
        "status": Status.FAIL, "none": None})
    for r in [*results, odd]:
        expected = dataclasses.asdict(r)
        expected["status"] = r.status.value
        got = r.to_dict()
        assert got == expected
        assert got["facts"] is not r.facts and got["evidence"] is not r.evidence
    assert len(results) > 20


def test_the_json_written_in_pieces_is_the_json_document():
    """`Report.json_chunks` (what report.json and --json write, one result at a time) is
    `json.dumps(to_dict(), indent=2)` byte for byte: no results, one, many, odd values."""
    import json
    from datetime import datetime
    from pathlib import Path

    from preflight.analyze import analyze
    from preflight.engine import Config, load_registry
    from preflight.model import Result, Status
    from preflight.report.base import Report

    root = Path(__file__).resolve().parent.parent / "examples" / "captures"
    results = analyze(load_registry([], Config()), [root / "healthy-node", root / "faulty-node"], jobs=1)
    odd = Result("x.y", "n1", Status.WARN, "line\nbreak \"quoted\" ünï \t", ["e\n2"], "r",
                 facts={"when": datetime(2026, 12, 5), "empty": {}, "none": [], "t": (1, "a")})
    for rs in ([], [odd], [*results, odd]):
        rep = Report.build("analyze", rs, profiles={"n1": "generic"})
        whole = json.dumps(rep.to_dict(), indent=2, default=str)
        assert "".join(rep.json_chunks()) == whole
        assert rep.to_json() == whole
        assert json.loads(whole)["results"] == [json.loads(json.dumps(r.to_dict(), default=str)) for r in rep.results]

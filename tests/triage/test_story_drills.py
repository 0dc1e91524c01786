"""Triage's story of a run, judged on real drills: what happened, attempt by attempt, and where
the job stands.

Real: torchrun, 4 gloo ranks on this machine, the runtime layer as a job owner uses it
(`tests/triage/_job.py`: the README's program as written for the kills, the same program with
replay for the replay drills). Each drill checks first that the fault happened as described
(torchrun's exit code, each rank's recorded end), then runs `preflight triage --run-dir D --json`
and judges its `story`:

    {"attempts": [{"attempt", "cause", "signal", "ranks", "nodes", "detail", "evidence", "ended"}, ...],
     "state", "recovered"}

- a rank SIGKILLed from outside mid-run, torchrun `--max-restarts 2` restarts, the job finishes:
  attempt 1 "killed" (SIGKILL) naming the rank and node, ended "restarted"; the last attempt
  "finished"; the job "recovered, finished", exit code 3; with and without the launcher's log;
- replay's exit 76 (a one-time corruption of rank 1's gradient): suspect hardware, rank 1 and
  its node, exit code 1;
- a NaN in rank 1's batch (replay reproduces it): bad data, rank 1 (not rank 0), exit code 1;
- a rank SIGKILLed from outside without a restart, the run directory alone: killed, that rank,
  the job failed, exit code 1.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, need
from tests.triage import _job
from tests.triage.test_torchrun_real import _explain, _torch

pytestmark = pytest.mark.real

PREFLIGHT = [sys.executable, "-c", "from preflight.cli import main; main()"]
HOST = _job.HOST
CAUSES = {"crash", "hang", "killed", "oom", "suspect hardware", "bad data", "preempted", "unknown", "none"}
ENDED = {"restarted", "in-process restart", "finished", "failed", "running", "preempted"}
STATES = {"finished", "recovered, finished", "recovered, training again", "failed", "running", "preempted"}
EXIT_RECOVERED = 3


def triage(run: Path, *extra: str, as_json: bool = True) -> tuple[int, Any, str]:
    """(exit code, the JSON document or the console text, stderr) of `preflight triage --run-dir`."""
    p = subprocess.run([*PREFLIGHT, "triage", "--run-dir", str(run), *extra, *(["--json"] if as_json else [])],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PREFLIGHT_HISTORY": "off"})
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    if not as_json:
        return p.returncode, p.stdout, p.stderr
    assert p.stdout.strip(), f"exit {p.returncode}, no JSON on stdout\n{p.stderr[-3000:]}"
    return p.returncode, json.loads(p.stdout), p.stderr


def story_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The story in the report (beside the culprits, or in the triage section), its shape checked."""
    story = doc.get("story") or (doc.get("triage") or {}).get("story")
    assert isinstance(story, dict), f"no story in the report: keys {sorted(doc)}, triage keys " \
                                    f"{sorted(doc.get('triage') or {})}"
    attempts = story.get("attempts")
    assert isinstance(attempts, list) and attempts, story
    assert [a.get("attempt") for a in attempts] == list(range(1, len(attempts) + 1)), story
    for a in attempts:
        assert a.get("cause") in CAUSES and a.get("ended") in ENDED, a
        assert a.get("signal") is None or str(a["signal"]).startswith("SIG"), a
        assert isinstance(a.get("ranks"), list) and isinstance(a.get("nodes"), list), a
        assert isinstance(a.get("detail"), str) and isinstance(a.get("evidence"), list), a
    assert story.get("state") in STATES and isinstance(story.get("recovered"), bool), story
    return story


def _why(doc: dict[str, Any], dr: _job.Drill, variant: str = "") -> str:
    t = doc.get("triage") or {}
    return (f"{dr.name} {variant} (rank {dr.rank}, pid {dr.pid}, fault at step {dr.step})\n"
            f"summary: {t.get('summary', doc.get('summary'))}\nstory: "
            f"{json.dumps(doc.get('story') or t.get('story'), indent=1)[:3000]}\nculprits: {doc.get('culprits')}\n"
            + "\n".join(doc.get("evidence") or []) + "\n" + _explain(dr.run, dr.log))


def _ends(dr: _job.Drill) -> dict[int, list[tuple[Any, Any]]]:
    return {r: [(e.get("how"), e.get("exit_code")) for e in v] for r, v in _job.exits(dr.run).items()}


# ----- the judges (the benchmark calls them too: an AssertionError is a wrong answer) --------------


def recovered_kill_happened(dr: _job.Drill) -> None:
    """Rank `dr.rank` was killed (torchrun saw -9), torchrun restarted, every rank then finished."""
    assert dr.rc == 0, _explain(dr.run, dr.log)
    assert "exitcode: -9" in dr.log.read_text(errors="replace"), _explain(dr.run, dr.log)
    ends = _ends(dr)
    assert all(ends[r][-1] == ("clean", 0) for r in range(4)) and len(ends[dr.rank]) == 1, \
        (ends, _explain(dr.run, dr.log))
    assert (dr.run / "final.pt").is_file()


def judge_recovered_kill(dr: _job.Drill, with_log: bool) -> str:
    """Triage's story of a recovered kill, with or without torchrun's log; its summary."""
    variant, extra = ("with torchrun's log", ("--log", str(dr.log))) if with_log else ("run dir alone", ())
    code, doc, _ = triage(dr.run, *extra)
    why = _why(doc, dr, variant)
    story = story_of(doc)
    first, last = story["attempts"][0], story["attempts"][-1]
    assert (first["cause"], first["signal"], first["ranks"], first["nodes"], first["ended"]) == \
        ("killed", "SIGKILL", [dr.rank], [HOST], "restarted"), why
    assert first["evidence"], why
    assert len(story["attempts"]) == 2 and last["ended"] == "finished", why
    assert (story["state"], story["recovered"]) == ("recovered, finished", True), why
    assert doc["culprits"] == [{"node": HOST, "ranks": [dr.rank]}], why
    assert code == EXIT_RECOVERED, why
    code, text, _ = triage(dr.run, *extra, as_json=False)
    assert "killed (SIGKILL)" in text and "recovered, finished" in text, f"{variant}\n{text}"
    assert code == EXIT_RECOVERED, f"{variant}: exit {code}\n{text}"
    return str((doc.get("triage") or {}).get("summary", ""))


def replay76_happened(dr: _job.Drill) -> None:
    ends = _ends(dr)
    assert dr.rc == 1 and sorted(ends) == [0, 1, 2, 3], (ends, _explain(dr.run, dr.log))
    assert all(v[-1][1] == 76 for v in ends.values()), (ends, _explain(dr.run, dr.log))  # every rank: exit 76


def judge_replay76(dr: _job.Drill) -> str:
    code, doc, _ = triage(dr.run)
    why = _why(doc, dr)
    story = story_of(doc)
    last = story["attempts"][-1]
    assert (last["cause"], last["ranks"], last["nodes"]) == ("suspect hardware", [dr.rank], [HOST]), why
    assert (len(story["attempts"]), story["state"], story["recovered"]) == (1, "failed", False), why
    assert doc["category"] == "hardware", why
    assert {"node": HOST, "ranks": [dr.rank]} in doc["culprits"], why
    assert code == 1, why
    return str((doc.get("triage") or {}).get("summary", ""))


def nan_batch_happened(dr: _job.Drill) -> None:
    ends = _ends(dr)
    assert dr.rc == 1 and sorted(ends) == [0, 1, 2, 3], (ends, _explain(dr.run, dr.log))
    assert all(v[-1] == ("exception", 1) for v in ends.values()), (ends, _explain(dr.run, dr.log))


def judge_nan_batch(dr: _job.Drill) -> str:
    code, doc, _ = triage(dr.run)
    why = _why(doc, dr)
    story = story_of(doc)
    last = story["attempts"][-1]
    assert (last["cause"], last["ranks"]) == ("bad data", [dr.rank]), why
    # replay ran the step again and it repeated: that verdict is the evidence, not a guess
    assert any("replay" in str(e) for e in last["evidence"]) and "not replayed" not in last["detail"], why
    assert (story["state"], story["recovered"]) == ("failed", False), why
    assert doc["culprits"] == [{"node": HOST, "ranks": [dr.rank]}], why  # the rank whose batch it was, not rank 0
    assert code == 1, why
    return str((doc.get("triage") or {}).get("summary", ""))


def outside_kill_happened(dr: _job.Drill) -> None:
    ends = _ends(dr)
    assert dr.rc == 1 and dr.rank not in ends, (ends, _explain(dr.run, dr.log))  # the killed rank wrote no end
    assert not any(p.suffix == ".log" for p in dr.run.iterdir())  # nothing of the launcher's in the run dir


def judge_outside_kill(dr: _job.Drill) -> str:
    """The run directory alone (no launcher's log)."""
    code, doc, _ = triage(dr.run)
    why = _why(doc, dr)
    story = story_of(doc)
    first = story["attempts"][0]
    assert (first["cause"], first["ranks"], first["nodes"]) == ("killed", [dr.rank], [HOST]), why
    assert (len(story["attempts"]), first["ended"], story["state"], story["recovered"]) == \
        (1, "failed", "failed", False), why
    assert doc["culprits"] == [{"node": HOST, "ranks": [dr.rank]}], why
    assert code == 1, why
    return str((doc.get("triage") or {}).get("summary", ""))


def _named(items: list[dict[str, Any]]) -> list[tuple[str, list[int], list[str]]]:
    return [(str(n["cause"]), list(n["ranks"]), list(n["nodes"])) for n in items]


def one_story(dr: _job.Drill, tmp: Path) -> None:
    """One story of a run: `preflight triage`, the `runtime.downtime` event the restarted job's
    rank 0 wrote while training (measured once training passed the failed step again) and
    `preflight record --run-dir` into a fresh history store name the same attempts, culprit and
    cause; the downtime counts the steps redone from the checkpoint."""
    from preflight.runtime import downtime as dt
    from preflight.runtime.events import read_events
    from tests.history.test_downtime_history import _cli, s_rows

    want = [("killed", [dr.rank], [HOST])]
    code, doc, _ = triage(dr.run)
    story = story_of(doc)
    failed = [a for a in story["attempts"] if a["cause"] not in ("none", "preempted")]
    assert _named(failed) == want and failed[0]["signal"] == "SIGKILL", story
    assert [a["ended"] for a in story["attempts"]] == ["restarted", "finished"] and code == EXIT_RECOVERED, story
    assert _named(doc["downtime"]["incidents"]) == want, doc["downtime"]
    measured = [e["facts"] for e in read_events(dr.run) if e["check"] == dt.CHECK]
    assert _named(measured) == want, measured
    m = measured[0]
    assert m["steps_redone"] > 0 and m["redo_s"] is not None and m["redo_s"] > 0, m  # a fault between checkpoints
    assert m["lost_s"] >= m["redo_s"] and m["passed_failed_step_at"] > m["training_again_at"], m
    assert doc["downtime"]["incidents"][0]["lost_s"] == m["lost_s"]  # triage takes the runtime's own measure
    url = f"sqlite:///{tmp / 'record.db'}"
    p = _cli("record", "--run-dir", str(dr.run), "--history", url)
    assert p.returncode == 0, p.stderr
    assert _named([r.facts for r in s_rows(url) if r.check == dt.CHECK]) == want


# ----- the drills ---------------------------------------------------------------------------------


def test_a_killed_rank_that_torchrun_recovered_is_named_and_the_job_recovered(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    dr = _job.kill_drill(tmp_path, 1, 2, random.Random())
    recovered_kill_happened(dr)
    judge_recovered_kill(dr, with_log=False)
    judge_recovered_kill(dr, with_log=True)
    one_story(dr, tmp_path)  # the same run: triage, the runtime's downtime and record agree


def test_replays_exit_76_is_suspect_hardware_on_the_rank_and_its_node(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    dr = _job.replay_drill(tmp_path, "corrupt", 1, 17)
    replay76_happened(dr)
    judge_replay76(dr)


def test_a_nan_in_rank_1s_batch_is_bad_data_on_rank_1(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    dr = _job.replay_drill(tmp_path, "nan", 1, 19)
    nan_batch_happened(dr)
    judge_nan_batch(dr)


def test_a_rank_killed_from_outside_without_a_restart_is_named_from_the_run_dir_alone(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    dr = _job.kill_drill(tmp_path, 2, 0, random.Random())
    outside_kill_happened(dr)
    judge_outside_kill(dr)

"""One story of a run: triage, the runtime's own downtime measurement and `preflight record
--run-dir` read the same run directory and name the same attempts, culprit and cause.

Real: torchrun, 4 gloo ranks running the README's program (`tests/triage/_job.py`), rank 1
SIGKILLed from outside mid-run, torchrun `--max-restarts 2` restarts the job from its newest
checkpoint and it finishes. Then:
- `preflight triage --run-dir D --json`: the story's attempts and the downtime it reports;
- the `runtime.downtime` event the restarted job's rank 0 wrote while training (measured once
  training passed the failed step again: the redone steps are in it);
- `preflight record --run-dir D` into a fresh history store, read back.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from preflight.runtime import downtime as dt
from preflight.runtime.events import read_events
from tests.conftest import need
from tests.history.test_downtime_history import _cli, s_rows
from tests.triage import _job
from tests.triage.test_story_drills import story_of, triage
from tests.triage.test_torchrun_real import _explain, _torch

pytestmark = pytest.mark.real


def _named(items: list[dict]) -> list[tuple[str, list[int], list[str]]]:
    return [(str(n["cause"]), list(n["ranks"]), list(n["nodes"])) for n in items]


def test_triage_the_runtimes_downtime_and_record_tell_the_same_story(tmp_path: Path) -> None:
    need(_torch(), "torch with gloo")
    dr = _job.kill_drill(tmp_path, 1, 2, random.Random(32))
    assert dr.rc == 0, _explain(dr.run, dr.log)
    want = [("killed", [1], [_job.HOST])]

    code, doc, _ = triage(dr.run)
    story = story_of(doc)
    failed = [a for a in story["attempts"] if a["cause"] not in ("none", "preempted")]
    assert _named(failed) == want and failed[0]["signal"] == "SIGKILL", story
    assert [a["ended"] for a in story["attempts"]] == ["restarted", "finished"], story
    assert story["state"] == "recovered, finished" and code == 3
    assert _named(doc["downtime"]["incidents"]) == want, doc["downtime"]

    measured = [e["facts"] for e in read_events(dr.run) if e["check"] == dt.CHECK]
    assert _named(measured) == want, measured
    m = measured[0]
    # a fault between checkpoints: the steps from the checkpoint to the failed one were redone,
    # and the runtime counted them (measured when training passed the failed step again)
    assert m["steps_redone"] > 0 and m["redo_s"] is not None and m["redo_s"] > 0, m
    assert m["lost_s"] >= m["redo_s"] and m["passed_failed_step_at"] > m["training_again_at"], m
    assert doc["downtime"]["incidents"][0]["lost_s"] == m["lost_s"]  # triage takes the runtime's measure

    url = f"sqlite:///{tmp_path / 'h.db'}"
    p = _cli("record", "--run-dir", str(dr.run), "--history", url)
    assert p.returncode == 0, p.stderr
    rows = [r for r in s_rows(url) if r.check == dt.CHECK]
    assert _named([r.facts for r in rows]) == want

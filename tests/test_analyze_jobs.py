"""`analyze --jobs`: node folders graded by a pool of processes give the very same results, in
the same order, as one process; a worker that dies loses nothing; a file is classified by its
content whatever its name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from preflight import analyze as an
from preflight.engine import Config, load_registry
from preflight.model import Status

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "examples" / "captures"


def _fleet(tmp: Path, n: int, faulty: set[int]) -> Path:
    """n node folders of hard-linked example captures, the nodes in `faulty` from the faulty node."""
    top = tmp / "fleet"
    for i in range(n):
        src = CAPTURES / ("faulty-node" if i in faulty else "healthy-node")
        node = top / f"gpu{i:04d}"
        node.mkdir(parents=True)
        for f in src.iterdir():
            os.link(f, node / f.name)
    # a multi-host paste of its own (one group of two nodes, compared across them)
    paste = top / "pdsh-versions.txt"
    version = (CAPTURES / "healthy-node" / "proc-driver-nvidia-version.txt").read_text().splitlines()
    paste.write_text("\n".join(f"{h}: {ln}" for h in ("gpu9001", "gpu9002") for ln in version) + "\n")
    return top


@pytest.fixture(scope="module")
def registry():
    return load_registry([], Config())


def _dicts(results) -> list[dict]:
    return [r.to_dict() for r in results]


def test_a_pool_gives_the_same_results_in_the_same_order(registry, tmp_path):
    top = _fleet(tmp_path, 9, faulty={2, 7})
    one = an.analyze(registry, [top], jobs=1)
    two = an.analyze(registry, [top], jobs=2)
    assert an._jobs_for(2, an._groups(an.entries([top]))) == 2  # the pool did run
    assert _dicts(one) == _dicts(two)
    bad = {r.node for r in one if r.status is Status.FAIL}
    assert bad == {"gpu0002", "gpu0007"}
    assert {"gpu9001", "gpu9002"} <= {r.node for r in one}


def test_a_worker_that_dies_loses_no_group(registry, tmp_path, monkeypatch):
    top = _fleet(tmp_path, 6, faulty={4})
    expected = _dicts(an.analyze(registry, [top], jobs=1))
    parent = os.getpid()
    real = an._Work.grade

    def dies_in_a_worker(self, i):
        if os.getpid() != parent:
            os._exit(9)  # killed (out of memory, a signal): the pool breaks
        return real(self, i)

    monkeypatch.setattr(an._Work, "grade", dies_in_a_worker)
    assert _dicts(an.analyze(registry, [top], jobs=2)) == expected


def test_few_groups_or_standard_input_stay_in_this_process(tmp_path):
    top = _fleet(tmp_path, 2, faulty=set())
    groups = an._groups(an.entries([top]))
    assert an._jobs_for(8, groups) == 1  # 3 groups: a pool would cost more than it saves
    many = an._groups(an.entries([_fleet(tmp_path / "b", 8, faulty=set())]))
    assert an._jobs_for(8, many) == 8 and an._jobs_for(None, many) == min(an.usable_cpus(), len(many))
    assert an._jobs_for(1, many) == 1
    stdin = [("stdin", [an.Entry("<stdin>", ("stdin",))]), *many]
    assert an._jobs_for(4, stdin) == 1


def test_cli_reports_are_identical_for_jobs_1_and_2(tmp_path):
    top = _fleet(tmp_path, 6, faulty={1})
    outs = []
    for jobs in ("1", "2"):
        p = subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", str(top), "--json", "--jobs", jobs],
                           capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert p.returncode == 1, p.stderr[-2000:]  # NO-GO: the faulty node
        doc = json.loads(p.stdout)
        doc.pop("started"), doc.pop("duration_s")
        outs.append(doc)
    assert outs[0] == outs[1]
    assert outs[0]["bad_nodes"] == ["gpu0001"]


def test_a_file_is_classified_by_content_whatever_its_name(registry, tmp_path):
    """A ping transcript saved under a GPU tool's name is read as ping; a listing under a
    meaningless name is read as the listing."""
    node = tmp_path / "gpu0001"
    node.mkdir()
    shutil.copy(ROOT / "tests" / "fixtures" / "ping" / "jumbo_silent_loss.txt", node / "nvidia-smi-q.txt")
    shutil.copy(CAPTURES / "healthy-node" / "nvidia-smi-q.txt", node / "out.log")
    entries = an.entries([node])
    found = {}
    for e in entries:
        text, _ = an.decode(e.load()[0])  # type: ignore[misc]
        found[e.name] = {f.name for d in an.frame(text).docs for f in an.classify(d, registry)}
    assert "ping" in found["nvidia-smi-q.txt"] and "nvidia-smi-q" not in found["nvidia-smi-q.txt"]
    assert "nvidia-smi-q" in found["out.log"]
    results = an.analyze(registry, [node], jobs=1)
    assert any(r.check == "net.mtu" for r in results)

"""collect: the files and process probes run for real on this machine, and the bundle round trip."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from preflight import registry as reg
from preflight.model import Capture, CaptureState
from preflight.probes import run_probe
from preflight.triage import collect, gather, judge
from tests.triage._bundles import TRIAGE


def test_files_probe_bounds_and_order(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "rank0.log").write_text("x" * 5000 + "TAIL")
    (run / "hang-rank1.json").write_text('{"rank": 1}')
    (run / "sub" / "fr-rank1.json").write_bytes((TRIAGE / "fr_gloo_rank1.json").read_bytes())
    (run / ".hidden").write_text("no")
    cap = run_probe(collect.files_probe(collect.RUN_DIR_PROBE, "dir", str(run), per_file=1000, total=3000))
    files, problem = collect.decode_files(cap)
    assert not problem
    names = [f.name for f in files]
    assert names[0] == "hang-rank1.json" and ".hidden" not in names
    log = next(f for f in files if f.name == "rank0.log")
    assert log.truncated and log.size == 5004 and log.text.endswith("TAIL") and len(log.data) == 1000
    missing = run_probe(collect.files_probe(collect.RUN_DIR_PROBE, "dir", str(tmp_path / "nope")))
    assert "no such folder" in collect.decode_files(missing)[1]
    glob = run_probe(collect.files_probe(collect.LOGS_PROBE, "glob", str(run / "**" / "*.json")))
    assert sorted(f.name.rsplit("/", 1)[-1] for f in collect.decode_files(glob)[0]) == ["fr-rank1.json",
                                                                                        "hang-rank1.json"]


def test_procs_probe_finds_a_stopped_training_process(tmp_path: Path) -> None:
    marker = str(tmp_path / "run-marker")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker],
                             env={"RANK": "7", "PATH": "/usr/bin:/bin"})
    try:
        import os
        import signal

        os.kill(child.pid, signal.SIGSTOP)
        cap = run_probe(collect.procs_probe(collect.re.escape(marker)))
        procs = collect.decode_procs(cap)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert [(p["pid"], p["rank"], p["state"]) for p in procs] == [(child.pid, 7, "T")]


def test_bundle_round_trip_and_unpacked_folder(tmp_path: Path) -> None:
    from tests.triage._bundles import files_capture, kernel_capture

    b = collect.Bundle(nodes={"gpu/1": {collect.RUN_DIR_PROBE: files_capture({"../rank0.log": "hello",
                                                                               "fr-rank2.json": "{}"}),
                                        "kernel-log": kernel_capture("[Mon Nov 23 06:00:01 2026] Linux\n")}},
                       errors={"gpu2": "connection refused"}, job={"job_id": "4242"}, run_dir="/runs/x")
    path = collect.write_bundle(b, tmp_path / "b.tar.gz")
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert "bundle/manifest.json" in names and "bundle/gpu_1/run/rank0.log" in names
    assert not any(".." in n for n in names)
    back = collect.read_bundle(path)
    assert back.job == {"job_id": "4242"} and back.errors == {"gpu2": "connection refused"}
    assert back.nodes["gpu/1"]["kernel-log"].stdout.startswith("[Mon Nov 23")
    assert back.nodes["gpu/1"][collect.RUN_DIR_PROBE].stdout == b.nodes["gpu/1"][collect.RUN_DIR_PROBE].stdout
    with tarfile.open(path) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    again = collect.read_bundle(tmp_path / "unpacked")
    assert set(again.nodes) == {"gpu/1"}
    verdict, _ = judge.triage(again, reg.load())
    assert verdict.category == "unknown"  # a log saying "hello" is no evidence of a clean run


def test_unreadable_bundles(tmp_path: Path) -> None:
    bad = tmp_path / "x.tar.gz"
    bad.write_bytes(b"not a tar")
    with pytest.raises(collect.BundleError):
        collect.read_bundle(bad)
    with pytest.raises(collect.BundleError):
        collect.read_bundle(tmp_path)


def test_node_check_probes_cover_xids_gpu_ib_fabric() -> None:
    names = {p.name for p in collect.node_check_probes(reg.load())}
    assert {"kernel-log", "nvidia-smi-q", "ibstat", "fm-service"} <= names
    assert json.dumps(sorted(names))


# ----- the gatherers as functions, as a module, and their documents' version -----------------------


def test_gather_files_directly_on_a_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "a" / "b" / "c").mkdir(parents=True)
    (run / "a" / "b" / "deep.log").write_text("two down")
    (run / "a" / "b" / "c" / "deeper.log").write_text("three down")
    (run / ".git").mkdir()
    (run / ".git" / "HEAD").write_text("x")
    (run / "crash-rank0.json").write_text("{}")
    (run / "big.log").write_text("y" * 100)
    (run / "other.bin").write_text("z" * 100)
    doc = gather.gather_files("dir", str(run), 1000, 110, 10)
    assert doc["protocol"] == gather.PROTOCOL and doc["exists"]
    names = [f["name"] for f in doc["files"]]
    assert names[0] == "crash-rank0.json" and "a/b/deep.log" in names
    assert not any("deeper" in n or ".git" in n for n in names)
    assert {s["path"].rsplit("/", 1)[-1]: s["reason"] for s in doc["skipped"]} == {
        "other.bin": "over the total size limit"}  # records, then logs, then the rest while room is left
    few = gather.gather_files("dir", str(run), 1000, 10_000, 1)
    assert len(few["files"]) == 1 and {s["reason"] for s in few["skipped"]} == {"over the file-count limit"}
    assert gather.gather_files("dir", str(tmp_path / "none"), 1, 1, 1)["exists"] is False


def test_gather_files_reports_an_unreadable_file_as_an_error(tmp_path: Path) -> None:
    (tmp_path / "ok.log").write_text("fine")
    (tmp_path / "dangling.log").symlink_to(tmp_path / "missing-target")
    doc = gather.gather_files("glob", str(tmp_path / "*.log"), 100, 100, 10)
    assert [f["name"] for f in doc["files"]] == [str(tmp_path / "ok.log")]
    assert doc["skipped"] == [{"path": str(tmp_path / "dangling.log"), "reason": "not a regular file"}]


def test_gather_procs_directly_never_lists_itself(tmp_path: Path) -> None:
    marker = str(tmp_path / "procs-marker")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker],
                             env={"RANK": "3", "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 10  # the new process shows its command line once it runs
        while marker.encode() not in Path(f"/proc/{child.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        doc = gather.gather_procs(re.escape(marker), 1.0, 5.0, 8)
        mine = gather.gather_procs(r"\bpytest\b|" + re.escape(marker), 1.0, 5.0, 8)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert doc["protocol"] == gather.PROTOCOL
    assert [(p["pid"], p["rank"]) for p in doc["processes"]] == [(child.pid, 3)]
    assert os.getpid() not in {p["pid"] for p in mine["processes"]}


@pytest.mark.parametrize("args", [[], ["files"], ["files", "tree", "x", "1", "1", "1"], ["files", "dir", "x", "a", "1", "1"],
                                  ["procs", "(", "1", "1", "1"], ["other"]])
def test_gather_bad_arguments_are_a_usage_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert gather.main(args) == 2
    err = capsys.readouterr()
    assert err.out == "" and "usage: gather files" in err.err


def test_gather_runs_as_a_module_and_as_its_own_shipped_text(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text("hello")
    args = ["files", "dir", str(tmp_path), "100", "100", "5"]
    as_module = subprocess.run([sys.executable, "-m", "preflight.triage.gather", *args], capture_output=True,
                               text=True, timeout=30)
    shipped = subprocess.run(collect.gather_command(*args), capture_output=True, text=True, timeout=30)
    assert collect.gather_command(*args)[2] == Path(gather.__file__).read_text()
    assert as_module.returncode == shipped.returncode == 0
    assert json.loads(as_module.stdout)["files"] == json.loads(shipped.stdout)["files"]
    assert json.loads(shipped.stdout)["files"][0]["name"] == "rank0.log"


def _doc_capture(doc: dict) -> Capture:
    return Capture(probe=collect.RUN_DIR_PROBE, argv=["python3"], state=CaptureState.OK, stdout=json.dumps(doc), rc=0)


def test_documents_of_another_gatherer_version_are_refused_with_a_reason() -> None:
    f = {"name": "rank0.log", "size": 2, "b64": "aGk="}
    newer = {"protocol": gather.PROTOCOL + 1, "exists": True, "files": [f], "processes": [{"pid": 1}],
             "skipped": [{"path": "x", "reason": "r", "error": True}]}
    files, problem = collect.decode_files(_doc_capture(newer))
    assert files == [] and f"protocol {gather.PROTOCOL + 1}, this preflight reads protocol" in problem
    assert collect.gather_problem(_doc_capture(newer)) == problem
    assert collect.decode_procs(_doc_capture(newer)) == [] and collect.decode_skipped(_doc_capture(newer)) == []
    # a document without a protocol (bundles saved before it was stated) is of protocol 1
    older = {k: v for k, v in newer.items() if k != "protocol"}
    assert [x.text for x in collect.decode_files(_doc_capture(older))[0]] == ["hi"]
    assert collect.decode_procs(_doc_capture(older)) == [{"pid": 1}]
    assert collect.decode_skipped(_doc_capture(older)) == [("x", "r")] and collect.gather_problem(_doc_capture(older)) == ""


@pytest.mark.parametrize("manifest", [b"[1, 2]", b'{"nodes": [1]}', b'{"nodes": {"n1": 5}, "job": "x"}'])
def test_a_manifest_of_the_wrong_shape_is_a_bundle_error_or_empty(tmp_path: Path, manifest: bytes) -> None:
    (tmp_path / "manifest.json").write_bytes(manifest)
    try:
        b = collect.read_bundle(tmp_path)
    except collect.BundleError as exc:
        assert "manifest" in str(exc)
    else:
        assert b.nodes == {} and b.job == {}

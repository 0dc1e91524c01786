"""collect: the files and process probes run for real on this machine, and the bundle round trip."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from preflight import registry as reg
from preflight.probes import run_probe
from preflight.triage import attribute, collect
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
    verdict, _ = attribute.triage(again, reg.load())
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

"""preflight.triage.run: where a collect or triage gets its nodes and bundle, and its bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.engine import UsageError
from preflight.triage import run


def test_a_job_id_that_is_not_one_is_refused_before_slurm_is_asked() -> None:
    for bad in ("42; rm -rf /", "abc", "4242_", ""):
        with pytest.raises(UsageError, match="use digits"):
            run.resolve_job(bad)


def test_hosts_or_this_node() -> None:
    from preflight.transport.local import local_node_name

    t = run.target_for(None, "gpu[01-03]")
    assert t.nodes == ["gpu01", "gpu02", "gpu03"] and not t.local and t.job == {}
    assert run.target_for(None, None).nodes == [local_node_name()]
    with pytest.raises(UsageError):
        run.target_for(None, "gpu[3-1]")


def test_triage_input_that_names_nothing_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    req = run.CollectRequest()
    with pytest.raises(UsageError, match="give a job id, a bundle, or --run-dir"):
        run.triage(None, None, req)
    with pytest.raises(UsageError, match="neither a bundle file nor a Slurm job id"):
        run.triage("not-a-job", None, req)
    bundle = tmp_path / "b.tar.gz"
    bundle.write_bytes(b"not a tar")
    with pytest.raises(UsageError, match="--hosts/--run-dir/--log do not apply"):
        run.triage(str(bundle), "n1", req)
    with pytest.raises(UsageError):
        run.triage(str(bundle), None, req)  # unreadable bundle: named, not a traceback
    with pytest.raises(UsageError, match=r"missing\.tar\.gz: no such bundle file"):
        run.triage(str(tmp_path / "missing.tar.gz"), None, req)
    with pytest.raises(UsageError, match="no such bundle file"):
        run.triage("job42.tgz", None, req)
    with pytest.raises(UsageError, match="a folder, not a bundle .* use --run-dir"):
        run.triage(str(tmp_path), None, req)


def test_collect_checks_the_run_dir_and_pattern_first(tmp_path: Path) -> None:
    target = run.target_for(None, None)
    with pytest.raises(UsageError, match="no such directory"):
        run.collect_bundle(target, run.CollectRequest(run_dir=str(tmp_path / "missing")))
    with pytest.raises(UsageError, match="--pattern"):
        run.collect_bundle(target, run.CollectRequest(run_dir=str(tmp_path), pattern="(unclosed"))
    with pytest.raises(UsageError, match="nothing to collect"):
        run.collect_bundle(target, run.CollectRequest(node_checks=False))

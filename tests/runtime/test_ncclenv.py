"""nccl_env recipe and the cross-rank environment consistency check."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from preflight.runtime.events import EventWriter, read_events
from preflight.runtime.ncclenv import check_env_consistency, env_differences, nccl_env
from tests.runtime._wd_ranks import init_gloo, launch, logs, wait_all

DEPRECATED = {"NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG", "ENABLE_NCCL_HEALTH_CHECK"}


def test_base_recipe_uses_current_names() -> None:
    env = nccl_env()
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker0"
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert int(env["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0 and int(env["TORCH_FR_BUFFER_SIZE"]) > 0
    assert env["TORCH_NCCL_ENABLE_MONITORING"] == "1" and int(env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) > 0
    assert not DEPRECATED & set(env)
    assert "NCCL_IB_HCA" not in env  # unknown hardware: NCCL picks the HCAs
    assert all(isinstance(v, str) for v in env.values())


def test_profile_name_dict_and_overrides(tmp_path: Path) -> None:
    env = nccl_env("h100-sxm-8x")
    assert env["NCCL_SOCKET_IFNAME"].startswith("^lo,docker")
    env = nccl_env({"nccl.ib_hca": ["mlx5_0", "mlx5_3"], "nccl.env.NCCL_IB_GID_INDEX": 3,
                    "NCCL_DEBUG": "INFO", "TORCH_NCCL_BLOCKING_WAIT": None}, run_dir=tmp_path)
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_3"
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NCCL_DEBUG"] == "INFO"
    assert "TORCH_NCCL_BLOCKING_WAIT" not in env
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(str(tmp_path))
    with pytest.raises(TypeError):
        nccl_env(42)


def test_env_differences_majority_and_unset() -> None:
    envs = [{"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "INFO", "NCCL_PROTO": "Simple"},
            {"NCCL_DEBUG": "WARN"}]
    diffs = env_differences(envs, ["a", "b", "c", "d"])
    assert {(d["rank"], d["key"], d["value"], d["expected"]) for d in diffs} == {
        (2, "NCCL_DEBUG", "INFO", "WARN"), (2, "NCCL_PROTO", "Simple", None)}
    assert all(d["host"] == "c" for d in diffs)
    assert env_differences(envs, ignore=["NCCL_DEBUG", "NCCL_PROTO"]) == []
    assert env_differences([]) == []


def test_without_process_group_is_consistent() -> None:
    assert check_env_consistency() == []


def rank_env(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path, required=True)
    a = ap.parse_args(argv)
    import torch.distributed as dist

    init_gloo()
    rank = dist.get_rank()
    diffs = check_env_consistency(events=EventWriter(a.run_dir, rank=rank))
    (a.run_dir / f"result-rank{rank}.json").write_text(json.dumps(diffs))
    dist.destroy_process_group()


@pytest.mark.real
def test_rank_with_different_nccl_variable_is_reported(tmp_path: Path) -> None:
    run = tmp_path / "run"
    common = nccl_env()
    procs = launch("tests.runtime.test_ncclenv:rank_env", 4, ["--run-dir", str(run)], run, env=common,
                   rank_env={1: {"NCCL_PROTO": "Simple"}, 3: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}})
    assert wait_all(procs, timeout=90) == [0, 0, 0, 0], logs(run)
    results = [json.loads((run / f"result-rank{r}.json").read_text()) for r in range(4)]
    assert all(r == results[0] for r in results)  # every rank gets the same answer
    got = {(d["rank"], d["key"], d["value"], d["expected"]) for d in results[0]}
    assert got == {(1, "NCCL_PROTO", "Simple", None), (3, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", "3")}
    ev = [e for e in read_events(run) if e["check"] == "runtime.nccl_env"]
    assert len(ev) == 1 and ev[0]["rank"] == 0 and ev[0]["status"] == "warn"
    assert ev[0]["facts"]["ranks"] == [1, 3]

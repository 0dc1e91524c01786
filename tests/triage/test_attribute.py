"""Attribution on bundles built from fixtures: hang, skip, hardware in time, crash, slowdown, garbage."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from preflight import registry as reg
from preflight.model import Status
from preflight.parsers import torch_log
from preflight.triage import attribute, collect, judge
from preflight.triage.collect import LOGS_PROBE
from tests.triage._bundles import TRIAGE, files_capture, kernel_capture, make_bundle

WD = TRIAGE / "wd_versions"
T0 = 1795431900.0  # when the ranks' logs were last written (the first failure)


def _wd_nodes(extra: dict[str, dict] | None = None) -> dict[str, dict]:
    mt = {f"rank{r}.log": T0 + r for r in range(6)}
    nodes = {"gpu017": {"triage-run-dir": files_capture({f"rank{r}.log": WD / f"rank{r}.log" for r in (0, 1, 2)},
                                                        mtimes=mt)},
             "gpu018": {"triage-run-dir": files_capture({f"rank{r}.log": WD / f"rank{r}.log" for r in (3, 4, 5)},
                                                        mtimes=mt)}}
    for n, caps in (extra or {}).items():
        nodes[n].update(caps)
    return nodes


def _dmesg_at(epoch: float, code: int = 79) -> str:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(epoch))
    return (f"[{stamp}] NVRM: GPU at PCI:0000:9b:00: GPU-7c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f\n"
            f"[{stamp}] NVRM: Xid (PCI:0000:9b:00): {code}, pid=0, GPU has fallen off the bus.\n")


@pytest.mark.parametrize("rank", [0, 1, 2, 3, 5])
def test_watchdog_formats_over_versions_parsed(rank: int) -> None:
    """op, seq, timeout, rank from each PyTorch era's watchdog line (old prefix, [rankN]:, PG ID/GUID)."""
    log = torch_log.parse_hang_log((WD / f"rank{rank}.log").read_text())
    ev = next(e for e in log.events if e.kind == "nccl_timeout")
    assert ev.rank == rank and ev.timeout_ms == 1800000
    assert (ev.op, ev.seq) == (("BROADCAST", 7732) if rank == 5 else ("ALLREDUCE", 7731))
    assert ev.ran_ms is not None and ev.ran_ms > 1800000


def test_hang_silent_rank_named_with_host_op_and_seq() -> None:
    verdict, results = judge.triage(make_bundle(_wd_nodes()))
    assert verdict.category == "communication hang"
    assert verdict.culprits == [{"node": "gpu018", "ranks": [4]}]
    assert verdict.collective == {"op": "ALLREDUCE", "seq": 7731}  # rank 5 had passed it (waits in 7732)
    assert any("rank 4" in e and "no timeout line" in e for e in verdict.evidence)
    assert results[0].check == "triage.verdict" and results[0].status is Status.FAIL
    assert "gpu018" in verdict.action and "rank 4" in verdict.action


def test_drain_action_is_the_slurm_adapters_command_with_a_preflight_reason() -> None:
    """The hardware verdict's action drains with the command and reason `preflight drain` uses
    (quoted for a shell, brackets and quotes in the summary kept harmless), then requeues."""
    import shlex

    from preflight import slurm

    action = attribute._drain_action(["gpu017", "gpu018"], 'Xid 79 "fallen off the bus" [GPU 3]', {"job_id": "77"})
    drain, _, rest = action.partition("; requeue")
    argv = shlex.split(drain.partition(": ")[2])
    assert argv[:4] == ["scontrol", "update", "NodeName=gpu[017-018]", "State=DRAIN"]
    reason = argv[4].removeprefix("Reason=")
    assert slurm.is_preflight_reason(reason) and reason.startswith("preflight: triage Xid 79")
    assert "[" not in reason and len(reason) <= slurm.REASON_MAX
    assert "scontrol requeue 77" in rest and "--exclude=gpu017,gpu018" in rest
    assert "scontrol requeue <job>" in attribute._drain_action(["n1"], "x", {})


def test_xid79_on_the_culprit_node_minutes_before_is_the_cause() -> None:
    nodes = _wd_nodes({"gpu018": {"kernel-log": kernel_capture(_dmesg_at(T0 - 300))},
                       "gpu017": {"kernel-log": kernel_capture(_dmesg_at(T0 - 9000, 13)[:0] + "[Mon Nov 23 06:00:01 "
                                                               "2026] Linux version 6.8.0\n")}})
    verdict, results = judge.triage(make_bundle(nodes), reg.load())
    assert verdict.category == "hardware"
    assert [c["node"] for c in verdict.culprits] == ["gpu018"] and 4 in verdict.culprits[0]["ranks"]
    assert verdict.action.startswith("drain gpu018") and "--exclude=gpu018" in verdict.action
    assert any("Xid" in e and "min before the first failure" in e for e in verdict.evidence)
    xid = [r for r in results if r.check == "gpu.xid"]
    assert {r.node: r.status for r in xid} == {"gpu018": Status.FAIL, "gpu017": Status.PASS}


def test_a_fatal_pcie_error_without_an_xid_is_timed_like_one() -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(T0 - 240))
    aer = (f"[{stamp}] pcieport 0000:98:01.0: AER: Uncorrected (Fatal) error received: 0000:9b:00.0\n"
           f"[{stamp}] nvidia 0000:9b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
           "(Receiver ID)\n"
           f"[{stamp}] nvidia 0000:9b:00.0:   device [10de:2330] error status/mask=00040000/00000000\n")
    nodes = _wd_nodes({"gpu018": {"kernel-log": kernel_capture(aer)}})
    verdict, _ = judge.triage(make_bundle(nodes), reg.load())
    assert verdict.category == "hardware", verdict
    assert [c["node"] for c in verdict.culprits] == ["gpu018"]
    assert any("min before the first failure" in e for e in verdict.evidence)


def test_old_xid_outside_the_window_is_not_the_cause() -> None:
    nodes = _wd_nodes({"gpu018": {"kernel-log": kernel_capture(_dmesg_at(T0 - 3 * 86400))}})
    verdict, _ = judge.triage(make_bundle(nodes), reg.load())
    assert verdict.category == "communication hang"
    assert any(f["node"] == "gpu018" and not f["correlated"] for f in verdict.node_faults)


def test_skipped_collective_from_flight_recorder_dumps() -> None:
    nodes = {"a": {"triage-run-dir": files_capture({"fr-rank0.json": TRIAGE / "fr_gloo_rank1.json",
                                                    "fr-rank1.json": TRIAGE / "fr_gloo_rank1.json"})},
             "b": {"triage-run-dir": files_capture({"fr-rank2.json": TRIAGE / "fr_gloo_rank2.json",
                                                    "hang-rank2.json": json.dumps({"rank": 2, "host": "b",
                                                                                   "section": "step", "time": T0})})}}
    verdict, _ = judge.triage(make_bundle(nodes))
    assert verdict.category == "communication hang"
    assert verdict.culprits == [{"node": "b", "ranks": [2]}]
    assert verdict.collective == {"op": "all_reduce", "seq": 3}
    assert any("rank 2 never entered all_reduce seq 3: its last was seq 2" in e for e in verdict.evidence)


def test_crash_first_failure_and_consequences() -> None:
    nodes = {"gpu017": {"triage-run-dir": files_capture({"rank3.log": TRIAGE / "rank3_crash.log"},
                                                        mtimes={"rank3.log": T0})},
             "gpu018": {"triage-run-dir": files_capture({"rank1.log": TRIAGE / "rank1_peer_closed.log"},
                                                        mtimes={"rank1.log": T0 + 5})}}
    verdict, _ = judge.triage(make_bundle(nodes))
    assert verdict.category == "software crash"
    assert verdict.culprits == [{"node": "gpu017", "ranks": [3]}]
    assert "RuntimeError" in verdict.summary and verdict.first_failure["rank"] == 3


def test_sigkill_without_traceback_points_at_memory() -> None:
    nodes = {"gpu022": {"triage-logs": files_capture({"launcher.log": TRIAGE / "rank5_sigkill.log"},
                                                     probe=LOGS_PROBE)}}
    verdict, _ = judge.triage(make_bundle(nodes))
    assert verdict.category == "software crash" and "SIGKILL" in verdict.summary
    assert verdict.culprits[0]["ranks"] == [5] and "OOM" in verdict.action


def test_ras_and_fr_trace_outputs_name_ranks() -> None:
    nodes = {"login": {"triage-logs": files_capture({"ras.txt": TRIAGE / "ncclras_rank_behind.txt",
                                                     "fr_trace.txt": TRIAGE / "fr_trace_missing_rank.txt"},
                                                    probe=LOGS_PROBE)}}
    verdict, _ = judge.triage(make_bundle(nodes))
    assert verdict.category == "communication hang"
    named = {r for c in verdict.culprits for r in c["ranks"]}
    assert named == {6, 13, 21}
    assert verdict.collective["seq"] == 4127


def test_stragglers_are_a_slowdown() -> None:
    ev = {"check": "runtime.straggler", "node": "gpu031", "status": "warn", "summary": "straggler at step 400: "
          "rank 9 (gpu031) score 1.62", "facts": {"stragglers": [9], "hosts": ["gpu031"]}, "rank": 0, "time": T0}
    nodes = {"gpu030": {"triage-run-dir": files_capture({"events-rank0.jsonl": json.dumps(ev) + "\n{torn"})}}
    verdict, results = judge.triage(make_bundle(nodes))
    assert verdict.category == "slowdown" and verdict.culprits == [{"node": "gpu031", "ranks": [9]}]
    assert results[0].status is Status.WARN


def test_nothing_and_garbage_never_raise(tmp_path: Path) -> None:
    verdict, results = judge.triage(make_bundle({}))
    assert verdict.category == "unknown" and results[0].status is Status.ERROR
    junk = {"n1": {"triage-run-dir": files_capture({"fr-rank0.json": b"\x80\x04junk", "hang-rank1.json": "{",
                                                    "events-rank0.jsonl": "not json", "heartbeat-rank0.json": "[]",
                                                    "blob.bin": b"\x00\x01", "rank9.log": "\xff garbage"}),
                   "triage-procs": files_capture({})}}
    broken = collect.Bundle(nodes=junk, errors={"n2": "connection refused"})
    verdict, _ = judge.triage(broken)
    assert verdict.category == "unknown"
    assert any("n2" in p for p in attribute.read_bundle_facts(broken).problems)
    assert verdict.input_errors == ["n1:hang-rank1.json: corrupt hang record: not JSON (Expecting property name "
                                    "enclosed in double quotes: line 1 column 2 (char 1)); not used"]

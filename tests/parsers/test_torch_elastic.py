"""preflight.parsers.torch_elastic: the torchelastic agent's own lines in both logging formats and
every prefix seen in front of them (a tqdm bar, a Ray actor, a launcher tag), across versions.
Inline captures written in the formats of torch/distributed/elastic (1.9 - 2.9) and torchelastic."""

from __future__ import annotations

import pytest

from preflight.framing import Doc
from preflight.parsers import torch_log
from preflight.parsers.torch_elastic import LINUX_SIGNALS, AgentEvent, AgentFailure, parse_elastic, signal_of


def _el(text: str):  # noqa: ANN202
    return parse_elastic(text.splitlines())


@pytest.mark.parametrize("line, code, rank, pid, signal, binary", [
    ("Loading checkpoint shards:  43% 3/7 [00:31<00:41, 10.4s/it]ERROR:torch.distributed.elastic.multiprocessing.api:"
     "failed (exitcode: -9) local_rank: 0 (pid: 4410) of binary: /usr/bin/python3", -9, 0, 4410, "SIGKILL",
     "/usr/bin/python3"),
    ("E0305 09:12:44.118000 140212 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
     "local_rank: 3 (pid: 91822) of binary: /opt/conda/envs/train/bin/python3.11", 1, 3, 91822, "",
     "/opt/conda/envs/train/bin/python3.11"),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 7 (pid: 2281) of fn: "
     "train_worker (start_method: spawn)", -6, 7, 2281, "SIGABRT", "train_worker (start_method spawn)"),
    ("failed (exitcode: 1) local_rank: 2 (pid: 17) of fn: main", 1, 2, 17, "", "main"),
    ("failed (exitcode: None) local_rank: 1 (pid: None) of binary: python  ", None, 1, None, "", "python"),
    ("[default0]:failed (exitcode: -11) local_rank: 0 (pid: 9) of binary: /usr/bin/python", -11, 0, 9, "SIGSEGV",
     "/usr/bin/python"),
])
def test_the_agents_line_for_a_failed_worker(line: str, code: int | None, rank: int, pid: int | None, signal: str,
                                             binary: str) -> None:
    el = _el("step 10 loss 2.1\n" + line + "\n")
    assert el.failures == [AgentFailure(rank, code, pid, signal, binary, line.strip(), 1)]
    assert el.recognised and el.events == []


@pytest.mark.parametrize("line, rank", [
    ("INFO:torch.distributed.elastic.multiprocessing.errors:local_rank 3 FAILED with no error file. Decorate your "
     "entrypoint fn with @record for traceback info. See: https://pytorch.org/docs/stable/elastic/errors.html", 3),
    ("I0305 09:12:45.001000 140212 torch/distributed/elastic/multiprocessing/errors/__init__.py:360] ('local_rank %s "
     "FAILED with no error file. Decorate your entrypoint fn with @record for traceback info. See: "
     "https://pytorch.org/docs/stable/elastic/errors.html', 5)", 5),
])
def test_a_failure_without_an_error_file(line: str, rank: int) -> None:
    [f] = _el(line).failures
    assert (f.local_rank, f.exitcode, f.pid, f.signal, f.binary, f.index) == (rank, None, None, "", "", 0)
    both = _el("failed (exitcode: 1) local_rank: 0 (pid: 8) of binary: python\n" + line)
    assert [x.local_rank for x in both.failures] == [0]  # the agent's own line says more
    assert _el("local_rank %s FAILED with no error file").failures == []


def test_a_failed_worker_group_in_1_9_and_torchelastic() -> None:
    text = ("[ERROR] 2020-07-31 07:15:34,783 local_elastic_agent: [default] Worker group failed\n"
            "ERROR:torch.distributed.elastic.agent.server.local_elastic_agent:[trainer] Worker group failed\n"
            "[INFO] [ft_launcher] [default] Worker group failed; 2 restarts remaining\n"
            "[default] Worker group failed to start\n")
    el = _el(text)
    assert [(e.kind, e.role, e.state, e.left, e.max_restarts, e.index) for e in el.events] == [
        ("failed", "default", "FAILED", None, None, 0), ("failed", "trainer", "FAILED", None, None, 1),
        ("restart", "default", "FAILED", 2, None, 2)]


def test_worker_group_states() -> None:
    text = ("I0213 12:07:20.086000 870572 torch/distributed/elastic/agent/server/api.py:889] [default] Worker group "
            "FAILED. 3/3 attempts left; will restart worker group\n"
            "INFO:torch.distributed.elastic.agent.server.api:[trainer] Worker group UNHEALTHY. 1/2 attempts left; will "
            "restart worker group\n"
            "torchelastic.agent.server.api.WorkerGroupFailureException: [default] exceeded max_restarts=3\n"
            "Exception: [default] Worker group in STOPPED state\n")
    el = _el(text)
    assert [(e.kind, e.role, e.state, e.left, e.max_restarts, e.index) for e in el.events] == [
        ("restart", "default", "FAILED", 3, 3, 0), ("restart", "trainer", "UNHEALTHY", 1, 2, 1),
        ("exceeded", "default", "FAILED", 0, 3, 2), ("exceeded", "default", "STOPPED", None, None, 3)]
    assert el.events[0].line == text.splitlines()[0]
    assert el.kind("restart") == el.events[:2] and el.failures == []


NEW_RDZV = """\
INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:
  restart_count=1
  master_addr=gpu-a07
  master_port=29500
  group_rank=1
  group_world_size=4
  local_ranks=[0, 1, 2, 3, 4, 5, 6, 7]
  role_ranks=[8, 9, 10, 11, 12, 13, 14, 15]
  global_ranks=[8, 9, 10, 11, 12, 13, 14, 15]
  role_world_sizes=[32, 32, 32, 32, 32, 32, 32, 32]
  global_world_sizes=[32, 32, 32, 32, 32, 32, 32, 32]

INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group
"""


def test_rendezvous_result_and_start() -> None:
    el = _el(NEW_RDZV)
    [rdzv, started] = el.events
    assert (rdzv.kind, rdzv.role, rdzv.index, started.kind, started.role, started.index) == (
        "rendezvous", "default", 0, "started", "default", 12)
    assert rdzv.result == {"restart_count": "1", "master_addr": "gpu-a07", "master_port": "29500", "group_rank": "1",
                           "group_world_size": "4", "local_ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
                           "role_ranks": "[8, 9, 10, 11, 12, 13, 14, 15]",
                           "global_ranks": "[8, 9, 10, 11, 12, 13, 14, 15]",
                           "role_world_sizes": "[32, 32, 32, 32, 32, 32, 32, 32]",
                           "global_world_sizes": "[32, 32, 32, 32, 32, 32, 32, 32]"}
    assert el.to_dict()["rendezvous"] == rdzv.result and el.to_dict()["events"] == ["rendezvous", "started"]


def test_rendezvous_result_behind_a_ray_actor_prefix_and_the_old_layout() -> None:
    ray = "".join(f"(RayTrainWorker pid=5120, ip=10.0.3.4) {ln}\n" for ln in NEW_RDZV.splitlines())
    assert _el(ray).events[0].result["group_world_size"] == "4"
    old = ("[INFO] 2021-03-02 11:04:12,331 api: [default] Rendezvous complete for workers.\nResult:\n"
           "\trestart_count=0\n\tgroup_rank=0\n\tgroup_world_size=2\n\tmaster_addr=node0\n\tmaster_port=44301\n"
           "\tworkers={'local_ranks': [0, 1], 'global_ranks': [0, 1], 'world_size': 4}\n")
    [rdzv] = _el(old).events
    assert rdzv.result == {"restart_count": "0", "group_rank": "0", "group_world_size": "2", "master_addr": "node0",
                           "master_port": "44301",
                           "workers": "{'local_ranks': [0, 1], 'global_ranks': [0, 1], 'world_size': 4}"}


def test_result_lines_belong_to_the_rendezvous_just_above() -> None:
    far = "[default] Rendezvous complete for workers. Result:\n" + "x\n" * 14 + "  restart_count=5\n"
    assert _el(far).events[0].result == {}
    near = "[default] Rendezvous complete for workers. Result:\n" + "x\n" * 13 + "  restart_count=5\n"
    assert _el(near).events[0].result == {"restart_count": "5"}
    assert _el("  restart_count=5\n[default] Starting worker group\n").events[0].result == {}


@pytest.mark.parametrize("line, kind, state", [
    ("INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting 300 "
     "seconds for other agents to finish.", "succeeded", "SUCCEEDED"),
    ("Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish",
     "succeeded", "SUCCEEDED"),
    ("Local worker group finished (SUCCEEDED). Waiting 300 seconds for other agents to finish", "succeeded",
     "SUCCEEDED"),
    ("[INFO] api: Local worker group finished (WorkerState.FAILED). Waiting 300 seconds for other agents to finish",
     "exceeded", "FAILED"),
    ("I0305 09:20:01.000000 1 torch/distributed/elastic/agent/server/api.py:968] Done waiting for other agents. "
     "Elapsed: 0.0012 seconds", "barrier", ""),
])
def test_the_end_of_a_worker_group(line: str, kind: str, state: str) -> None:
    [e] = _el(line).events
    assert (e.kind, e.state, e.line) == (kind, state, line)


@pytest.mark.parametrize("line, state", [
    ("WARNING:torch.distributed.elastic.agent.server.api:Received Signals.SIGTERM death signal, shutting down workers",
     "SIGTERM"),
    ("W0305 10:00:00.000000 1 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, shutting "
     "down workers", "SIGTERM"),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 7301 got signal: 2", "SIGINT"),
    ("SignalException: Process 7301 got signal: Signals.SIGHUP", "SIGHUP"),
    ("WARNING:torch.distributed.elastic.agent.server.api:Got termination signal: Signals.SIGTERM", "SIGTERM"),
    ("Received 40 death signal, shutting down workers", "40"),
])
def test_death_signals(line: str, state: str) -> None:
    [e] = _el(line).events
    assert (e.kind, e.state) == ("signalled", state)


def test_a_signal_is_one_event_however_often_it_is_said() -> None:
    el = _el("Received Signals.SIGTERM death signal, shutting down workers\n"
             "SignalException: Process 7301 got signal: 15\nSignalException: Process 7302 got signal: 2\n")
    assert [(e.state, e.index) for e in el.events] == [("SIGTERM", 0), ("SIGINT", 2)]


@pytest.mark.parametrize("text, title", [
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\nmain.py FAILED\n"
     + "-" * 60 + "\n", "main.py"),
    ("*" * 39 + "\n           pretrain_gpt.py FAILED            \n" + "=" * 39 + "\nRoot Cause:\n", "pretrain_gpt.py"),
    ("=" * 60 + "\nnot a title\n" + "=" * 60 + "\nx.py FAILED\n", "x.py"),
    ("=" * 60 + "\nnot a title\nx.py FAILED\n", ""),
    ("x.py FAILED\n", ""),
    ("=======\nx.py FAILED\n", ""),  # a border is at least 8 characters
])
def test_the_title_of_a_failure_table(text: str, title: str) -> None:
    assert _el(text).title == title


def test_the_first_title_wins() -> None:
    assert _el("=" * 60 + "\na.py FAILED\n" + "=" * 60 + "\nb.py FAILED\n").title == "a.py"


@pytest.mark.parametrize("code, name", [(-9, "SIGKILL"), (-6, "SIGABRT"), (-7, "SIGBUS"), (-15, "SIGTERM"),
                                        (-99, "signal 99"), (0, ""), (1, ""), (None, "")])
def test_signal_of(code: int | None, name: str) -> None:
    assert signal_of(code) == name


def test_linux_signal_numbers() -> None:
    assert (LINUX_SIGNALS[1], LINUX_SIGNALS[2], LINUX_SIGNALS[11], LINUX_SIGNALS[13]) == (
        "SIGHUP", "SIGINT", "SIGSEGV", "SIGPIPE")


def test_facts_as_a_dict() -> None:
    el = _el("failed (exitcode: -9) local_rank: 1 (pid: 50) of binary: python\n" + "=" * 30 + "\nrun.py FAILED\n")
    assert el.to_dict() == {"failures": [{"local_rank": 1, "exitcode": -9, "pid": 50, "signal": "SIGKILL",
                                          "binary": "python"}],
                            "events": [], "rendezvous": None, "title": "run.py"}
    assert _el("[x] Starting worker group").to_dict() == {"failures": [], "events": ["started"], "rendezvous": None,
                                                         "title": None}
    ok = _el("failed (exitcode: 0) local_rank: 1 (pid: 50) of binary: python").to_dict()
    assert ok["failures"][0]["signal"] is None


@pytest.mark.parametrize("text", ["", "step 1 loss 2.0\n", "failed (exitcode: x) local_rank: 1\n",
                                  "Worker group FAILED. attempts left\n", "Rendezvous complete\n",
                                  "Starting worker group\n", "[x] Starting worker group now\n", "\x00\xff\n"])
def test_unrelated_text_is_not_the_agent(text: str) -> None:
    el = _el(text)
    assert not el.recognised and el.failures == [] and el.events == [] and el.title == ""


def test_kinds() -> None:
    el = _el("[a] Starting worker group\n[b] Starting worker group\n")
    assert [e.role for e in el.kind("started")] == ["a", "b"] and el.kind("succeeded") == []
    assert AgentEvent("started").result == {} and AgentEvent("x").line == ""


@pytest.mark.parametrize("text", [
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 1) of binary: p\n",
    "progress 10%|#  | 1/10 [00:01<00:09]E0213 12:07:20.086000 1 api.py:869] failed (exitcode: 1) local_rank: 0 (pid: "
    "2) of binary: p\n",
    "I0213 12:07:20.086000 1 api.py:889] [default] Worker group FAILED. 3/3 attempts left; will restart worker group\n",
    "ray/0 (CommandActor pid=4) INFO:torch.distributed.elastic.agent.server.api:[] Rendezvous complete for workers. "
    "Result:\n",
    "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group\n",
    "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.\n",
    "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish\n",
    "Done waiting for other agents. Elapsed: 0.5 seconds\n",
    "Received Signals.SIGTERM death signal, shutting down workers\n",
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15\n",
    "WorkerGroupFailureException: [default] exceeded max_restarts=3\n",
    "Exception: [default] Worker group in UNKNOWN state\n",
    "[ERROR] 2020-07-31 07:15:34,783 local_elastic_agent: [default] Worker group failed\n",
    "('local_rank %s FAILED with no error file. Decorate your entrypoint fn with @record', 0)\n",
])
def test_detected_as_a_training_log(text: str) -> None:
    doc = Doc(text)
    assert torch_log.detect(doc)
    assert torch_log.parse(doc).recognised


@pytest.mark.parametrize("text", ["Starting worker group\n", "the worker group successfully finished\n",
                                  "Rendezvous complete\n", "Done waiting for other agents\n",
                                  "failed (exitcode: 1)\n", "Worker group in progress\n"])
def test_not_detected(text: str) -> None:
    assert not torch_log.detect(Doc(text))


def test_the_signal_table_is_linux_signal_7() -> None:
    from preflight.parsers import torch_elastic

    for n, name in torch_elastic.LINUX_SIGNALS.items():
        assert signal_of(-n) == name
    assert [signal_of(-n) for n in (5, 10, 12, 14, 25)] == ["SIGTRAP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXFSZ"]
    assert torch_elastic.LINUX_SIGNALS == {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
                             7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
                             13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}
    assert signal_of(-24) == "SIGXCPU" and signal_of(-31) == "signal 31"


@pytest.mark.parametrize("line", [
    "torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 12) of binary: /usr/bin/python",
    "local_rank 3 FAILED with no error file. Decorate your entrypoint fn with @record for traceback info.",
    "[default] Worker group FAILED. 2/3 attempts left; will restart worker group",
    "[default] exceeded max_restarts=3",
    "[default] Worker group failed",
    "[default] Worker group in SUCCEEDED state",
    "[default] Rendezvous complete for workers. Result:",
    "[default] Starting worker group",
    "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.",
    "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish",
    "Done waiting for other agents. Elapsed: 0.0012 seconds",
    "Received Signals.SIGTERM death signal, shutting down workers",
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15",
])
def test_each_agent_line_alone_is_a_training_log(line: str) -> None:
    assert torch_log.detect(Doc(f"I1128 10:00:00.000 12 api.py:1 {line}\n"))
    assert parse_elastic([line]).events or parse_elastic([line]).failures


# ---------------------------------------------------------------------------------------------
# The agent's ERROR lines no rule reads: kept (hang.watchdog/unread-error), never dropped

UNREAD_ERRORS = [
    # agent/server/api.py _exit_barrier (logging's default format, before 2.2)
    "ERROR:torch.distributed.elastic.agent.server.local_elastic_agent:Error waiting on exit barrier. Elapsed: "
    "300.0123 seconds",
    # rendezvous/dynamic_rendezvous.py shutdown (glog style, 2.2+)
    "E1125 10:11:12.123000 123 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1152] The node "
    "'gpu017_123_0' has failed to shutdown the rendezvous 'job1' due to an error of type RendezvousConnectionError.",
    # logging's default format at CRITICAL (agent/server/api.py, before 2.2)
    "CRITICAL:torch.distributed.elastic.agent.server.api:Error waiting on exit barrier. Elapsed: 300.0123 seconds",
]


@pytest.mark.parametrize("line", UNREAD_ERRORS)
def test_unread_error_line_is_kept(line: str) -> None:
    el = parse_elastic(["[INFO] something else", line])
    assert el.unread == [line] and el.recognised
    assert not el.failures and not el.events


def test_read_error_line_is_not_unread() -> None:
    el = parse_elastic(["E1125 10:11:12.123000 123 torch/distributed/elastic/multiprocessing/api.py:869] failed "
                        "(exitcode: 1) local_rank: 0 (pid: 123) of binary: /usr/bin/python"])
    assert el.failures and el.unread == []


@pytest.mark.parametrize("line", UNREAD_ERRORS)
def test_unread_error_line_is_graded(line: str) -> None:
    import io
    from pathlib import Path

    from preflight import registry
    from preflight.analyze import analyze
    from preflight.model import Status

    results = analyze(registry.load(), [Path("-")], profile_name="auto",
                      stdin=io.BytesIO(f"[root@gpu017 ~]# torchrun --nproc-per-node 8 train.py\n{line}\n".encode()))
    hw = [r for r in results if r.check == "hang.watchdog"]
    assert hw and hw[0].status is Status.WARN and hw[0].facts["codes"] == ["hang.watchdog/unread-error"]
    assert any(line in e for e in hw[0].evidence)

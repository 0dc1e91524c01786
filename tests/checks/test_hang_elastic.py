"""hang.watchdog over the launcher's lines: the torchelastic agent (torchrun) and its failure table.
Inline captures in the formats of torch/distributed/elastic (1.9 - 2.9)."""

from __future__ import annotations

import pytest

from preflight.checks.hang_elastic import MEANING, REMEDY_FAILED, REMEDY_RESTARTED, REMEDY_SIGNALLED
from preflight.model import Result, Status
from tests.conftest import capture, grade

AGENT = "torch/distributed/elastic/agent/server/api.py"
FAILED_9 = ("Loading checkpoint shards:  43% 3/7 [00:31<00:41, 10.4s/it]ERROR:torch.distributed.elastic."
            "multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4410) of binary: /usr/bin/python3\n")
CHILD = ("Traceback (most recent call last):\n  File \"/usr/local/bin/torchrun\", line 8, in <module>\n"
         "    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
         + "=" * 54 + "\nfinetune.py FAILED\n" + "-" * 54 + "\nFailures:\n  <NO_OTHER_FAILURES>\n")
FAILED_1 = ("E0305 09:12:44.118000 140212 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
            "local_rank: 3 (pid: 91822) of binary: /opt/conda/bin/python\n")
RESTART = (f"I0305 09:12:44.119000 140212 {AGENT}:889] [default] Worker group FAILED. 2/3 attempts left; will restart "
           f"worker group\nI0305 09:12:44.119000 140212 {AGENT}:699] [default] Stopping worker group\n"
           f"I0305 09:12:44.120000 140212 {AGENT}:677] [default] Rendezvous'ing worker group\n")
RDZV = (f"I0305 09:13:02.500000 140212 {AGENT}:525] [default] Rendezvous complete for workers. Result:\n"
        "  restart_count={n}\n  master_addr=gpu-a07\n  master_port=29500\n  group_rank=0\n  group_world_size=2\n"
        f"  local_ranks=[0, 1, 2, 3]\n\nI0305 09:13:02.501000 140212 {AGENT}:683] [default] Starting worker group\n")
DONE = (f"I0305 10:00:00.000000 140212 {AGENT}:902] [default] worker group successfully finished. Waiting 300 seconds "
        "for other agents to finish.\n")


def watchdog(text: str) -> Result:
    [r] = grade("hang.watchdog", {"watchdog-log": capture("watchdog-log", text)}, mode="analyze")
    return r


def codes(r: Result) -> list[str]:
    return list(r.facts.get("codes", []))


def test_a_worker_killed_by_sigkill_names_the_oom_killer() -> None:
    r = watchdog(FAILED_9 + CHILD)
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/worker-failed"]
    assert r.summary == ("torchrun: local rank 0 (pid 4410) of /usr/bin/python3 running finetune.py failed with "
                         "exitcode -9 (SIGKILL), the OOM killer's signature (host memory ran out), or a kill -9 from "
                         "the scheduler")
    assert r.evidence[0] == FAILED_9.strip() and r.remedy == REMEDY_FAILED
    assert "'Out of memory: Killed process'" in r.remedy
    assert r.facts["elastic"] == {"failures": [{"local_rank": 0, "exitcode": -9, "pid": 4410, "signal": "SIGKILL",
                                                "binary": "/usr/bin/python3"}],
                                  "events": [], "rendezvous": None, "title": "finetune.py"}


def test_a_failed_worker_the_agent_restarts() -> None:
    r = watchdog(FAILED_1 + RESTART)
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/worker-failed"]
    assert r.summary == ("torchrun: local rank 3 (pid 91822) of /opt/conda/bin/python failed with exitcode 1, an "
                         "uncaught exception in the worker (its traceback is in the worker's own output); the worker "
                         "group FAILED, the agent restarts it (2/3 attempts left)")
    assert r.evidence == [FAILED_1.strip(), RESTART.splitlines()[0]]


def test_a_worker_group_that_started_again_recovered() -> None:
    r = watchdog(FAILED_1 + RESTART + RDZV.format(n=1))
    assert r.status is Status.WARN and codes(r) == ["hang.watchdog/worker-restarted"]
    assert r.summary == ("torchrun: local rank 3 (pid 91822) of /opt/conda/bin/python failed with exitcode 1, an "
                         "uncaught exception in the worker (its traceback is in the worker's own output); the agent "
                         "restarted the worker group, which started again (restart_count=1)")
    assert r.evidence[-1].endswith("[default] Starting worker group") and r.remedy == REMEDY_RESTARTED
    done = watchdog(FAILED_1 + RESTART + RDZV.format(n=1) + DONE)
    assert done.summary.endswith("which started again (restart_count=1) and finished successfully")
    assert done.evidence[-1] == DONE.strip()
    bare = watchdog(FAILED_1 + RESTART + f"I0305 {AGENT}:683] [default] Starting worker group\n")
    assert bare.summary.endswith("the agent restarted the worker group, which started again")


def test_a_restart_that_failed_again_is_a_failure() -> None:
    again = FAILED_1 + RESTART + RDZV.format(n=1) + FAILED_1.replace("91822", "91900")
    r = watchdog(again)
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/worker-failed"]
    assert r.summary.startswith("torchrun: local rank 3 (pid 91822)")
    gave_up = watchdog(FAILED_1 + RESTART + RDZV.format(n=1) + CHILD)
    assert codes(gave_up) == ["hang.watchdog/worker-failed"]  # torchrun raised: it gave up


def test_a_failed_group_without_the_workers_line() -> None:
    r = watchdog(RESTART)
    assert codes(r) == ["hang.watchdog/worker-failed"]
    assert r.summary == ("torchelastic: a worker failed; the worker group FAILED, the agent restarts it (2/3 attempts "
                         "left)")
    old = watchdog("[INFO] api: Local worker group finished (WorkerState.FAILED). Waiting 300 seconds for other agents "
                   "to finish\n")
    assert old.summary == "torchelastic: a worker failed; the worker group FAILED with no restart left"
    exceeded = watchdog("torchelastic.agent.server.api.WorkerGroupFailureException: [default] exceeded "
                        "max_restarts=3\n")
    assert exceeded.summary == ("torchelastic: a worker failed; the worker group FAILED with no restart left "
                                "(max_restarts=3)")


def test_a_failed_group_in_the_old_wording() -> None:
    old = watchdog("[ERROR] 2020-07-31 07:15:34,783 local_elastic_agent: [default] Worker group failed\n")
    assert codes(old) == ["hang.watchdog/worker-failed"] and old.summary == "torchelastic: a worker failed"
    left = watchdog("[INFO] [ft_launcher] [default] Worker group failed; 2 restarts remaining\n")
    assert left.summary == "torchelastic: a worker failed; the worker group FAILED, the agent restarts it (2 attempts left)"
    again = watchdog("[INFO] [ft_launcher] [default] Worker group failed; 2 restarts remaining\n"
                     + RDZV.format(n=1))
    assert codes(again) == ["hang.watchdog/worker-restarted"]


def test_the_workers_exception_is_the_cause() -> None:
    text = ("[rank3]: Traceback (most recent call last):\n[rank3]:   File \"train.py\", line 40, in <module>\n"
            "[rank3]: ValueError: bad shape (4, 3)\n" + FAILED_1)
    r = watchdog(text)
    assert r.summary == ("torchrun: local rank 3 (pid 91822) of /opt/conda/bin/python failed with exitcode 1: "
                         "ValueError: bad shape (4, 3)")
    assert r.evidence[-1] == "ValueError: bad shape (4, 3)"  # the framing peels the rank tag
    group = watchdog(text.replace(FAILED_1, RESTART))
    assert group.summary.startswith("torchelastic: a worker failed: ValueError: bad shape (4, 3); the worker group")


def test_the_table_says_more_than_the_agent_line() -> None:
    table = ("  time      : 2025-03-05_09:12:44\n  host      : gpu-a07\n  rank      : 11 (local_rank: 3)\n"
             "  exitcode  : 1 (pid: 91822)\n  error_file: <N/A>\n")
    r = watchdog(FAILED_1 + CHILD + "Root Cause (first observed failure):\n[0]:\n" + table)
    assert r.summary.startswith("torchrun: rank 11 on gpu-a07 failed with exitcode 1")
    assert r.facts["torchrun"] == {"rank": 11, "host": "gpu-a07", "exitcode": 1, "signal": None}
    assert r.facts["elastic"]["failures"][0]["local_rank"] == 3


def test_a_child_failed_error_without_its_record() -> None:
    r = watchdog(CHILD)
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/worker-failed"]
    assert r.summary == ("torchrun: a worker failed (finetune.py) (ChildFailedError); its failure record is not in "
                         "the capture")
    untitled = watchdog(CHILD.replace("finetune.py FAILED\n", ""))
    assert untitled.summary == "torchrun: a worker failed (ChildFailedError); its failure record is not in the capture"
    assert untitled.evidence[-1] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"


def test_a_death_signal_from_outside() -> None:
    text = (f"W0305 10:00:00.000000 1 {AGENT}:704] Received Signals.SIGTERM death signal, shutting down workers\n"
            "W0305 10:00:00.100000 1 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 7 closing "
            "signal SIGTERM\n"
            "Traceback (most recent call last):\n  File \"/usr/bin/torchrun\", line 8, in <module>\n"
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7301 got signal: 15\n")
    r = watchdog(text)
    assert r.status is Status.WARN and codes(r) == ["hang.watchdog/agent-signalled"]
    assert r.summary == ("torchrun received SIGTERM and shut its workers down: stopped from outside (the scheduler's "
                         "time limit, preemption or scancel, or srun ending the step after another task failed)")
    assert r.evidence == [text.splitlines()[0]] and r.remedy == REMEDY_SIGNALLED
    with_failure = watchdog(FAILED_9 + CHILD + text)
    assert codes(with_failure) == ["hang.watchdog/worker-failed"]


def test_restarts_before_the_capture() -> None:
    r = watchdog(RDZV.format(n=2))
    assert r.status is Status.WARN and codes(r) == ["hang.watchdog/elastic-restarted"]
    assert r.summary == ("torchelastic: the worker group runs after 2 restart(s) (restart_count=2): workers failed "
                         "before this capture starts")
    assert r.evidence == ["restart_count=2", RDZV.splitlines()[0]] and r.remedy == REMEDY_RESTARTED


@pytest.mark.parametrize("text, summary", [
    (RDZV.format(n=0), "torchelastic: workers started (group_world_size 2, group_rank 0, restart_count 0), no failure "
                       "in the log"),
    (f"INFO:{AGENT}:[default] Starting worker group\n", "torchelastic: workers started, no failure in the log"),
    (RDZV.format(n=0) + DONE, "torchelastic: the worker group finished successfully, no failure in the log"),
    ("Done waiting for other agents. Elapsed: 0.4 seconds\n",
     "torchelastic: the worker group finished successfully, no failure in the log"),
    ("[default] Rendezvous complete for workers. Result:\n",
     "torchelastic: workers started, no failure in the log"),
    ("Sending process 7 closing signal SIGTERM\n"
     "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 0\n",
     "no collective timeout or job failure in the log"),
])
def test_a_healthy_start_or_finish_passes(text: str, summary: str) -> None:
    r = watchdog(text)
    assert r.status is Status.PASS and codes(r) == [] and r.summary == summary


@pytest.mark.parametrize("code, why", [
    (-7, "SIGBUS), a bus error, most often /dev/shm too small for the data loader's shared memory"),
    (-11, "SIGSEGV), a segmentation fault in native code (an extension, a library, the driver)"),
    (-15, "SIGTERM), terminated from outside (the scheduler's time limit, preemption, scancel, or the launcher)"),
    (-2, "SIGINT), interrupted (Ctrl-C)"),
    (-1, "SIGHUP), the session that started it ended"),
    (-4, "SIGILL), an illegal instruction (a binary built for another CPU)"),
    (-8, "SIGFPE), an arithmetic fault in native code"),
    (-6, "SIGABRT), an abort: PyTorch's watchdog after a collective timeout or NCCL error, or a C++ exception"),
    (-13, "SIGPIPE)"),
    (-40, "signal 40)"),
    (2, "exitcode 2"),
])
def test_what_ended_the_worker(code: int, why: str) -> None:
    r = watchdog(f"failed (exitcode: {code}) local_rank: 0 (pid: 5) of binary: python\n")
    assert r.summary.endswith(why)


def test_meanings_cover_the_signals_a_gpu_job_dies_of() -> None:
    assert {"SIGKILL", "SIGABRT", "SIGSEGV", "SIGBUS", "SIGTERM"} <= set(MEANING)


def test_a_worker_without_pid_or_binary() -> None:
    r = watchdog("INFO:torch.distributed.elastic.multiprocessing.errors:local_rank 3 FAILED with no error file. "
                 "Decorate your entrypoint fn with @record for traceback info.\n")
    assert r.summary == "torchrun: local rank 3 failed with exitcode unknown"


def test_a_collective_failure_says_more_than_the_launcher() -> None:
    wd = ("[rank3]:[E305 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
          "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 "
          "milliseconds before timing out.\n")
    r = watchdog(wd + FAILED_1.replace("exitcode: 1", "exitcode: -6") + RESTART)
    assert codes(r) == ["hang.watchdog/collective-timeout"]
    assert r.facts["elastic"]["failures"][0]["exitcode"] == -6 and r.facts["elastic"]["events"] == ["restart"]


SPAWN = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    mp.spawn(main, nprocs=8)\n"
         "torch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 3 terminated with the following error:\n"
         "Traceback (most recent call last):\n  File \"/opt/conda/lib/python3.10/site-packages/torch/multiprocessing/"
         "spawn.py\", line 69, in _wrap\n    fn(i, *args)\n  File \"train.py\", line 40, in main\n"
         "    x = load(cfg)\nKeyError: 'optimizer'\n")


def test_a_spawned_process_that_raised() -> None:
    r = watchdog(SPAWN)
    assert r.status is Status.FAIL and codes(r) == ["hang.watchdog/worker-failed"]
    assert r.summary == "process 3 raised an exception: KeyError: 'optimizer'"
    assert r.evidence[0] == "-- Process 3 terminated with the following error:"
    assert r.evidence[-1] == "KeyError: 'optimizer'" and "torchrun" not in r.facts


def test_the_rendezvous_store_cannot_be_reached() -> None:
    text = ("[W305 10:00:01.000000000 socket.cpp:752] [c10d] The client socket cannot be initialized to connect to "
            "[gpu-a01]:29400 (errno: 97 - Address family not supported by protocol).\n"
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
            "failed. See inner exception for details.\n")
    r = watchdog(text)
    assert codes(r) == ["hang.watchdog/store-failure"]
    assert "The connection to the C10d store has failed" in r.summary
    harmless = watchdog(text.splitlines()[0] + "\nstep 10 loss 2.1\n")
    assert harmless.status is Status.SKIP and codes(harmless) == ["hang.watchdog/not-recognised"]

"""The small parsers triage and the cross-node checks read: NCCL RAS status, py-spy dumps, Slurm
job records and the version strings a fleet must agree on. Inline captures in the tools'
formats, odd cases included."""

from __future__ import annotations

from preflight.framing import Doc
from preflight.parsers import py_spy, ras, slurm_job, versions

RAS = """\
Job summary
===========

  Nodes  Processes   GPUs  Processes     GPUs
(total)   per node  per node (total)   (total)
      4          8         8       32        32

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 48211 on node 10.1.7.23 managing GPU 5

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 48219 on node 10.1.7.24 managing GPUs 0-7

#0-1 (8c3b7e5a2f) MISMATCH
  Communicator ranks have different AllReduce operation counts
  26 ranks have launched up to operation 9184
  5 ranks have launched up to operation 9183
  Rank 6 has launched up to operation 9183 -- GPU 6 managed by process 48111 on node 10.1.7.22
  Rank 7 has not launched any operations -- GPU 7 managed by process 48112 on node 10.1.7.22

#0-2 (8c3b7e5a2f) ERROR
  Rank 21 has status ABORTED -- GPU 5 managed by process 48211 on node 10.1.7.23
  Rank 22 -- [process information not found]
"""


def test_ras_sections_processes_ranks_and_counts() -> None:
    assert ras.looks_like_ras(RAS)
    st = ras.parse_ras(RAS)
    assert st.missing_processes == [{"pid": 48211, "node": "10.1.7.23", "gpus": "5"}]
    assert st.dead_processes == [{"pid": 48219, "node": "10.1.7.24", "gpus": "0-7"}]
    keys = ("rank", "section", "launched", "status", "node", "pid", "comm", "op")
    assert [tuple(r[k] for k in keys) for r in st.ranks] == [
        (6, "MISMATCH", 9183, "", "10.1.7.22", 48111, "#0-1", "AllReduce"),
        (7, "MISMATCH", 0, "", "10.1.7.22", 48112, "#0-1", "AllReduce"),
        (21, "ERROR", None, "ABORTED", "10.1.7.23", 48211, "#0-2", ""),
        (22, "ERROR", None, "", "", None, "#0-2", ""),
    ]
    assert st.majority_launched == 9184 and st.mismatched_ops == ["AllReduce"] and not st.empty
    assert st.lines[:4] == ["INCOMPLETE", "Missing communicator data from 1 job process",
                            "Process 48211 on node 10.1.7.23 managing GPU 5", "DEAD"]
    assert "#0-1 (8c3b7e5a2f) MISMATCH" in st.lines and "26 ranks have launched up to operation 9184" in st.lines
    assert "5 ranks have launched up to operation 9183" in st.lines and st.majority_launched == 9184


def test_ras_a_single_rank_group_is_a_majority() -> None:
    assert ras.parse_ras("  1 ranks have launched up to operation 5\n").majority_launched == 5


def test_ras_majority_is_the_largest_group_whatever_its_order() -> None:
    st = ras.parse_ras("  3 ranks have launched up to operation 10\n  29 ranks have launched up to operation 12\n"
                       "  29 ranks have launched up to operation 11\n")
    assert st.majority_launched == 12 and st.empty  # counts alone single nobody out


def test_ras_detection_and_empty_text() -> None:
    assert ras.looks_like_ras("Collecting data...\nCommunicators... (0.00s)\n")
    assert ras.looks_like_ras("Group  Comms  Nodes  Ranks\n")
    assert ras.looks_like_ras("x\nErrors\n======\n")
    assert not ras.looks_like_ras("Errors\n------\n") and not ras.looks_like_ras("step 1 loss 2.0")
    empty = ras.parse_ras("Errors\n======\nINCOMPLETE\n")
    assert empty.empty and empty.lines == ["INCOMPLETE"] and empty.majority_launched is None
    only_ops = ras.parse_ras("Communicator ranks have different Broadcast operation counts\n")
    assert not only_ops.empty and only_ops.mismatched_ops == ["Broadcast"]


PY_SPY = """\
Process 48003: python train.py --cfg a.yaml
Python v3.11.7 (/usr/bin/python3.11)

Thread 0x7F3A11C2B740 (idle): "MainThread"
    wait (threading.py:320)
        Arguments:
            self: <Condition at 0x7f3a>
        Locals:
            waiter: <_thread.lock at 0x7f3b>
    save_checkpoint (ckpt.py:91)
    <module> (train.py)
Thread 48010 (active): "pt_watchdog"
    run (watchdog.py:44)
Process 48004: python train.py
Python
Thread 0x7F00 (active+gil)
    step (train.py:10)
"""


def test_py_spy_processes_threads_frames_and_locals() -> None:
    procs = py_spy.parse_py_spy("preamble before any process\n" + PY_SPY)
    assert [(p.pid, p.cmdline, p.python) for p in procs] == [(48003, "python train.py --cfg a.yaml", "v3.11.7"),
                                                            (48004, "python train.py", "")]
    main = procs[0].main_thread()
    assert main is not None and (main.tid, main.state, main.name) == ("0x7F3A11C2B740", "idle", "MainThread")
    assert main.frames == ["wait (threading.py:320)", "save_checkpoint (ckpt.py:91)", "<module> (train.py)"]
    assert [(t.tid, t.state, t.name, t.frames) for t in procs[0].threads[1:]] == [
        ("48010", "active", "pt_watchdog", ["run (watchdog.py:44)"])]
    only = procs[1].main_thread()
    assert only is not None and only.name == "" and only.frames == ["step (train.py:10)"]
    assert py_spy.PySpyProcess(1, "x").main_thread() is None


def test_py_spy_frames_need_a_thread_and_shallow_indentation() -> None:
    procs = py_spy.parse_py_spy("Process 1: x\n    orphan (a.py:1)\nThread 2 (idle)\n"
                                "          deep (b.py:2)\n  shallow (c.py:3)\n     five (d.py:4)\n"
                                "    four (e.py:5)\n")
    assert procs[0].threads[0].frames == ["shallow (c.py:3)", "four (e.py:5)"]
    two = py_spy.parse_py_spy('Process 1: x\nThread 5 (idle): "worker"\nThread 6 (idle): "MainThread"\n')
    main = two[0].main_thread()
    assert main is not None and main.tid == "6"


def test_scontrol_and_sacct_records() -> None:
    job = slurm_job.parse_scontrol_job(
        "JobId=4242 JobName=train\n   JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n"
        "   StartTime=2026-11-23T09:02:11 EndTime=Unknown\n   NodeList=gpu[001-004]\n")
    assert (job.job_id, job.state, job.exit_code, job.start, job.end, job.nodelist, job.problem) == (
        "4242", "FAILED", "1:0", "2026-11-23T09:02:11", "", "gpu[001-004]", "")
    done = slurm_job.parse_scontrol_job("JobId=5 EndTime=2026-11-23T10:00:00 StartTime=2026-11-23T09:00:00")
    assert (done.start, done.end) == ("2026-11-23T09:00:00", "2026-11-23T10:00:00")
    assert len(slurm_job.parse_scontrol_job("x" * 300).problem) == 200
    assert len(slurm_job.parse_sacct("y" * 300).problem) == 200
    pending = slurm_job.parse_scontrol_job("JobId=7 JobState=PENDING NodeList=(null) StartTime=None\n")
    assert pending.nodelist == "" and pending.start == ""
    bad = slurm_job.parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\nmore\n")
    assert bad.problem == "slurm_load_jobs error: Invalid job id specified" and bad.job_id == ""
    assert slurm_job.parse_scontrol_job("").problem == "no output"
    acct = slurm_job.parse_sacct("\n|x|\n4242|gpu[001-004]|2026-11-23T09:02:11|2026-11-23T10:00:00|TIMEOUT|0:15\n")
    assert (acct.job_id, acct.nodelist, acct.start, acct.end, acct.state, acct.exit_code) == (
        "4242", "gpu[001-004]", "2026-11-23T09:02:11", "2026-11-23T10:00:00", "TIMEOUT", "0:15")
    for none in ("None assigned", "(null)"):
        assert slurm_job.parse_sacct(f"9|{none}|Unknown|Unknown|PENDING|0:0\n").nodelist == ""
    assert slurm_job.parse_sacct("|a|b|c|d|e\n").problem == "|a|b|c|d|e"
    assert slurm_job.parse_sacct("sacct: error: x\n").problem == "sacct: error: x"
    assert slurm_job.parse_sacct("  \n").problem == "no output"
    assert slurm_job.parse_sacct("1|n|2026-11-23T09:02:11Z|x|RUNNING|0:0").start == ""


def _doc(text: str) -> Doc:
    return Doc(text)


def test_versions_of_ofed_kernel_and_nccl() -> None:
    assert versions.parse_ofed(_doc("MLNX_OFED_LINUX-5.8-3.0.7.0:\n")).value == "MLNX_OFED_LINUX-5.8-3.0.7.0"
    assert versions.parse_ofed(_doc("OFED-internal-24.04-0.6.6:\n")).value == "OFED-internal-24.04-0.6.6"
    assert versions.parse_ofed(_doc("\nDOCA-2.9.1 something\n")).value == "DOCA-2.9.1"
    assert versions.parse_ofed(_doc("doca-host-2.8.0\n")).value == "doca-host-2.8.0"
    assert versions.parse_ofed(_doc("rdma-core 50.0\n")).value == "rdma-core 50.0"
    assert versions.parse_ofed(_doc("first line\nsecond: MLNX_OFED_LINUX-23.10-1.1.9.0\n")).value == \
        "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert versions.parse_ofed(_doc("a\nb\n")).value == "a"
    assert versions.parse_ofed(_doc("doca-host-2.8.0\nrdma-core\n")).value == "doca-host-2.8.0"
    for err in ("ofed_info: command not found", "sh: No such file", "Error reading"):
        assert versions.parse_ofed(_doc(err + "\n")).value is None
    assert versions.parse_ofed(_doc("")).value is None
    assert versions.parse_kernel_release(_doc("banner\n5.15.0-1053-nvidia\n")).value == "5.15.0-1053-nvidia"
    assert versions.parse_kernel_release(_doc("6.8.0+rc1~x\n")).value == "6.8.0+rc1~x"
    assert versions.parse_kernel_release(_doc("Linux 5.15\n")).value is None
    libs = "libnccl.so\nlibnccl.so.2\nlibnccl.so.2.9.9\nlibnccl.so.2.21.5\nlibnccl.so.2.18.10\n"
    assert versions.parse_nccl_libs(_doc(libs)).value == "2.21.5"
    assert versions.parse_nccl_libs(_doc("libnccl.so.2\n")).value is None
    assert versions.parse_nccl_libs(_doc("x libnccl.so.2.19.3\nlibnccl.so.2.20.1\n")).value == "2.20.1"
    assert [p.probe for p in versions.PARSERS] == ["ofed", "uname-r", "nccl-libs"]

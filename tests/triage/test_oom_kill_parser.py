"""The OOM killer's kernel-log lines (mm/oom_kill.c, mm/memcontrol.c), every layout and framing."""

from __future__ import annotations

import pytest

from preflight.parsers import oom_kill

MODERN = ("Out of memory: Killed process 48213 (python) total-vm:98211044kB, anon-rss:64179832kB, file-rss:0kB, "
          "shmem-rss:10240kB, UID:1000 pgtables:131420kB oom_score_adj:0")
MEMCG = ("Memory cgroup out of memory: Killed process 48213 (pt_main_thread) total-vm:98211044kB, "
         "anon-rss:64179832kB, file-rss:4kB, shmem-rss:0kB, UID:1000 pgtables:131420kB oom_score_adj:0")
OLD_CHOSEN = "Out of memory: Kill process 7781 (python) score 912 or sacrifice child"
OLD_KILLED = "Killed process 7781 (python) total-vm:48211044kB, anon-rss:31179832kB, file-rss:0kB, shmem-rss:0kB"
OLDER_KILLED = "Killed process 7781 (python) total-vm:48211044kB, anon-rss:31179832kB, file-rss:0kB"
SUMMARY = ("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
           "task_memcg=/system.slice/slurmstepd.scope/job_4242,task=python,pid=48213,uid=1000")
SUMMARY_MEMCG = ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
                 "oom_memcg=/slurm/uid_1000/job_4242,task_memcg=/slurm/uid_1000/job_4242/step_0/task_2,"
                 "task=pt_main_thread,pid=48213,uid=1000")
REAPED = "oom_reaper: reaped process 48213 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"
INVOKED = "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"
TASK_IN = "Task in /slurm/uid_1000/job_4242/step_0 killed as a result of limit of /slurm/uid_1000/job_4242"


@pytest.mark.parametrize(("line", "kind", "pid", "comm", "memcg"), [
    (MODERN, "killed", 48213, "python", False),
    (MEMCG, "killed", 48213, "pt_main_thread", True),
    (OLD_CHOSEN, "chosen", 7781, "python", False),
    ("Memory cgroup out of memory: Kill process 7781 (python) score 1000 or sacrifice child", "chosen", 7781,
     "python", True),
    ("Out of memory (oom_kill_allocating_task): Kill process 7781 (python) score 0 or sacrifice child", "chosen",
     7781, "python", False),
    (OLD_KILLED, "killed", 7781, "python", False),
    ("Kill process 7790 (python) sharing same memory", "killed", 7790, "python", False),
    (OLDER_KILLED, "killed", 7781, "python", False),
    (SUMMARY, "summary", 48213, "python", False),
    (SUMMARY_MEMCG, "summary", 48213, "pt_main_thread", True),
    (REAPED, "reaped", 48213, "python", False),
    (INVOKED, "invoked", None, "python", False),
    (TASK_IN, "memcg_limit", None, "", True),
])
def test_each_layout(line: str, kind: str, pid: int | None, comm: str, memcg: bool) -> None:
    ev = oom_kill.parse_line(line)
    assert ev is not None
    assert (ev.kind, ev.pid, ev.comm, ev.memcg) == (kind, pid, comm, memcg)


def test_sizes_uid_score_and_cgroup() -> None:
    ev = oom_kill.parse_line(MODERN)
    assert ev is not None and ev.reason == "Out of memory" and ev.uid == 1000
    assert ev.sizes_kb == {"total-vm": 98211044, "anon-rss": 64179832, "file-rss": 0, "shmem-rss": 10240,
                           "pgtables": 131420}
    chosen = oom_kill.parse_line(OLD_CHOSEN)
    assert chosen is not None and chosen.score == 912
    s = oom_kill.parse_line(SUMMARY_MEMCG)
    assert s is not None and s.cgroup == "/slurm/uid_1000/job_4242" and s.uid == 1000
    s = oom_kill.parse_line(SUMMARY)
    assert s is not None and s.cgroup == "/system.slice/slurmstepd.scope/job_4242" and not s.memcg


@pytest.mark.parametrize("comm", ["(sd-pam)", "my proc (x)", "a) b", "python3 train.p"])
def test_a_task_name_with_spaces_and_parentheses(comm: str) -> None:
    for line in (f"Out of memory: Killed process 11 ({comm}) total-vm:10kB, anon-rss:5kB, file-rss:0kB, "
                 "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0",
                 f"Out of memory: Kill process 11 ({comm}) score 5 or sacrifice child",
                 f"Killed process 11 ({comm}) total-vm:10kB, anon-rss:5kB, file-rss:0kB",
                 f"oom_reaper: reaped process 11 ({comm}), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"):
        ev = oom_kill.parse_line(line)
        assert ev is not None and (ev.pid, ev.comm) == (11, comm), line


@pytest.mark.parametrize("line", [
    "Killed process",  # cut short
    "Killed process abc (python) total-vm:1kB",
    "bash: line 1: 4242 Killed                  python train.py",  # a shell's job report, not the kernel
    "Out of memory: Killed",
    "oom-kill:",
    "CUDA out of memory. Tried to allocate 2.00 GiB",
    "",
])
def test_lines_that_are_no_oom_kill(line: str) -> None:
    ev = oom_kill.parse_line(line)
    assert ev is None or (ev.pid is None and ev.kind in ("summary",)), ev


def test_every_framing_keeps_the_pid_and_the_time() -> None:
    framed = {
        "dmesg raw": f"[1234567.891011] {MODERN}",
        "dmesg -T": f"[Thu Nov 26 06:44:18 2026] {MODERN}",
        "dmesg iso": f"2026-11-26T06:44:18,123456+00:00 {MODERN}",
        "journal short": f"Nov 26 06:44:18 gpu003 kernel: {MODERN}",
        "journal short-iso": f"2026-11-26T06:44:18+0000 gpu003 kernel: {MODERN}",
        "journal short-precise": f"Nov 26 06:44:18.123456 gpu003 kernel: {MODERN}",
        "pdsh": f"gpu003: [Thu Nov 26 06:44:18 2026] {MODERN}",
    }
    for name, text in framed.items():
        log = oom_kill.parse(f"{text}\n")
        assert [(e.kind, e.pid) for e in log.events] == [("killed", 48213)], name
        if name != "dmesg raw":
            assert log.events[0].time is not None, name
        if name in ("journal short", "journal short-iso", "pdsh"):
            assert log.events[0].host == "gpu003", name


def test_a_whole_report_in_a_log_among_other_lines() -> None:
    text = "\n".join(f"[Thu Nov 26 06:44:{s:02d} 2026] {line}" for s, line in enumerate([
        "NVRM: GPU at PCI:0000:18:00: GPU-5ad6b6a0-0000-0000-0000-000000000000",
        INVOKED,
        "CPU: 12 PID: 48213 Comm: python Not tainted 6.8.0-45-generic #45-Ubuntu",
        "Mem-Info:",
        "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        "[  48213]  1000 48213 24552761 16044958 134574080        0             0 python",
        SUMMARY,
        MODERN,
        REAPED,
        "eth0: link up",
    ])) + "\n"
    log = oom_kill.parse(text)
    assert [e.kind for e in log.events] == ["invoked", "summary", "killed", "reaped"]
    assert sorted(log.victims()) == [48213]
    assert [e.kind for e in log.of(48213)] == ["summary", "killed", "reaped"]
    assert log.of(1) == []
    words = oom_kill.describe(log.of(48213))
    assert "host memory" in words and "python (pid 48213)" in words and "61.2 GiB" in words
    memcg = oom_kill.parse(f"{SUMMARY_MEMCG}\n{MEMCG}\n")
    assert "memory cgroup limit of /slurm/uid_1000/job_4242" in oom_kill.describe(memcg.of(48213))


def test_nothing_to_read() -> None:
    assert oom_kill.parse("").events == []
    assert oom_kill.parse("\x00\x01 binary \xff").events == []
    assert oom_kill.describe([]) == ""


# ----- odd cases and the exact words of each result ------------------------------------------------


def test_a_whole_log_selects_the_old_choice_line_and_the_memcg_limit_line() -> None:
    log = oom_kill.parse("[ 12.5] Out of memory: Kill process 4242 (python) score 903 or sacrifice child\n"
                         "[ 12.6] Task in /slurm/uid_0/job_7 killed as a result of limit of /slurm/uid_0/job_7\n")
    assert [e.kind for e in log.events] == ["chosen", "memcg_limit"]
    assert log.events[0].score == 903 and log.events[0].pid == 4242
    limit = log.memcg_limit
    assert len(limit) == 1 and limit[0].cgroup == "/slurm/uid_0/job_7" and limit[0].memcg
    assert limit[0].reason == "memory cgroup limit"
    assert list(log.victims()) == [4242]  # the memcg line names no pid: no None key


def test_the_choice_needs_a_score_or_a_reason() -> None:
    assert oom_kill.parse_line("Kill process 7 (a) score 12").kind == "chosen"
    assert oom_kill.parse_line("Kill process 7 (a) score 12 or sacrifice child").kind == "chosen"
    assert oom_kill.parse_line("Out of memory: Kill process 7 (a)").reason == "Out of memory"
    assert oom_kill.parse_line("Kill process 7 (a) sharing same memory").kind == "killed"
    assert oom_kill.parse_line("Kill process 7 (a)") is None  # no sign of the OOM killer


def test_a_summary_reads_its_constraint_and_either_memcg_sign() -> None:
    ev = oom_kill.parse_line("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
                             "task_memcg=/job_7,task=python,pid=4242,uid=0")
    assert ev.reason == "CONSTRAINT_MEMCG" and ev.memcg and ev.cgroup == "/job_7" and ev.uid == 0
    ev = oom_kill.parse_line("oom-kill:constraint=CONSTRAINT_NONE,oom_memcg=/job_8,task=python,pid=5,uid=1")
    assert ev.memcg and ev.cgroup == "/job_8"
    ev = oom_kill.parse_line("oom-kill:constraint=CONSTRAINT_NONE,task_memcg=/user.slice,task=python,pid=5,uid=1")
    assert not ev.memcg and ev.n == 0


def test_describe_words() -> None:
    host = oom_kill.parse_line("Out of memory: Killed process 9 (python) total-vm:1kB, anon-rss:786432kB, "
                               "file-rss:0kB")
    assert oom_kill.describe([host]) == ("out of memory (host memory): the kernel's OOM killer killed python "
                                         "(pid 9), anon-rss 0.8 GiB")
    summary = oom_kill.parse_line("oom-kill:constraint=CONSTRAINT_NONE,task=train,pid=11,uid=0")
    reaped = oom_kill.parse_line("oom_reaper: reaped process 12 (other), now anon-rss:0kB, file-rss:0kB")
    assert "killed train (pid 11)" in oom_kill.describe([summary, reaped])  # no kill line: the first
    nameless = oom_kill.OomEvent(kind="killed", line="", pid=3)
    assert "killed ? (pid 3)" in oom_kill.describe([nameless])

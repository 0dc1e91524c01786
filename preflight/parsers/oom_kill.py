"""The Linux OOM killer's reports in a kernel log: which process it killed, and why.

Pure: text (any framing `preflight.framing` peels: dmesg raw / -T / iso, journalctl, syslog,
kmsg, pdsh prefixes) -> facts. Only lines holding one of `NEEDLES` are framed, so a large kernel
log is read at the speed of a substring scan.

The messages, as the kernel prints them (mm/oom_kill.c, mm/memcontrol.c; the kernel versions in
which each layout appeared):

- `<comm> invoked oom-killer: gfp_mask=0x..(..), order=N, oom_score_adj=N` (dump_header, 2.6.x
  on; `oomkilladj=` before 2.6.36): the task that *asked* for memory, often not the victim;
- `Out of memory: Kill process <pid> (<comm>) score <n> or sacrifice child` (oom_kill_process,
  up to 4.19; `Memory cgroup out of memory: Kill ...` from the memory cgroup; `Out of memory
  (oom_kill_allocating_task): Kill ...` with that sysctl set): the victim chosen;
- `Killed process <pid> (<comm>) total-vm:..kB, anon-rss:..kB, file-rss:..kB[, shmem-rss:..kB]`
  (oom_kill_process / __oom_kill_process, 3.x - 4.x; `, UID:<uid> pgtables:..kB
  oom_score_adj:<n>` added in 5.x) and, since 4.20, with the reason in front: `Out of memory:
  Killed process ...` or `Memory cgroup out of memory: Killed process ...`: the kill itself;
- `oom-kill:constraint=CONSTRAINT_<NONE|CPUSET|MEMORY_POLICY|MEMCG>,nodemask=..,cpuset=..,
  mems_allowed=..,[global_oom|oom_memcg=<path>],task_memcg=<path>,task=<comm>,pid=<pid>,uid=<uid>`
  (dump_oom_summary, 4.19 on): one line per kill with the cgroup;
- `Task in <memcg> killed as a result of limit of <memcg>` (mem_cgroup_print_oom_context, up
  to 4.18): a memory cgroup's limit (a Slurm job's, a container's) was reached;
- `Kill process <pid> (<comm>) sharing same memory` (up to 4.x): another process of the
  victim's memory, killed with it;
- `oom_reaper: reaped process <pid> (<comm>), now anon-rss:..kB, file-rss:..kB, shmem-rss:..kB`
  (oom_reap_task_mm, 4.6 on): the victim's memory taken back.

`comm` is the kernel's task name: at most 15 characters, and it may hold spaces and
parentheses (`(sd-pam)`, `pt_main_thread`, `python3 train.py` cut short). The pid is the one
in the kernel's initial pid namespace: a rank in a container with a pid namespace of its own
reports another number for itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from preflight import lazyre
from preflight.framing import Line, frame

NEEDLES = ("Killed process", "Kill process", "oom-kill:", "oom_reaper:", "invoked oom-killer",
           "killed as a result of limit")

# the text after the pid and comm: "total-vm" (kill), ", UID" (5.x has it after the sizes),
# " score" (a victim chosen), ", now" (reaped), " sharing" (an mm shared), or the end
_COMM_END = r"(?=\s+total-vm:|,\s*(?:UID|total-vm|now)\b|\s+score\s+\d|\s+sharing\b|\s*,?\s*$)"
_KILLED = lazyre.compile(r"(?:(?P<why>[A-Za-z][A-Za-z ()_-]*?):\s+)?Killed process (?P<pid>\d+) \((?P<comm>.*?)\)"
                     + _COMM_END + r"(?P<rest>.*)$")
_CHOSEN = lazyre.compile(r"(?:(?P<why>[A-Za-z][A-Za-z ()_-]*?):\s+)?Kill process (?P<pid>\d+) \((?P<comm>.*?)\)"
                     + _COMM_END + r"(?:\s+score\s+(?P<score>\d+))?(?P<rest>.*)$")
_REAPED = lazyre.compile(r"oom_reaper: reaped process (?P<pid>\d+) \((?P<comm>.*?)\)" + _COMM_END + r"(?P<rest>.*)$")
_SUMMARY = lazyre.compile(r"oom-kill:(?P<fields>.*)$")
_INVOKED = lazyre.compile(r"^(?P<comm>.*?) invoked oom-killer:(?P<rest>.*)$")
_TASK_IN = lazyre.compile(r"Task in (?P<memcg>\S+) killed as a result of limit of (?P<limit>\S+)")
_SIZE = lazyre.compile(r"(?P<key>total-vm|anon-rss|file-rss|shmem-rss|pgtables):\s*(?P<kb>\d+)\s*kB")
_UID = lazyre.compile(r"\bUID:?\s*(?P<uid>\d+)")
_FIELD = lazyre.compile(r"(?P<key>[a-z_]+)=(?P<value>[^,]*)")


@dataclass
class OomEvent:
    """One OOM-killer line. `kind`: "killed", "chosen", "summary", "reaped", "invoked" or
    "memcg_limit"; `pid` and `comm` of the victim (of the allocating task for "invoked", where
    the kernel prints no pid)."""

    kind: str
    line: str
    pid: int | None = None
    comm: str = ""
    reason: str = ""  # "Out of memory", "Memory cgroup out of memory", ...
    memcg: bool = False  # a memory cgroup's limit, not the whole machine
    cgroup: str = ""  # task_memcg / oom_memcg / the memcg named
    uid: int | None = None
    score: int | None = None
    sizes_kb: dict[str, int] = field(default_factory=dict)  # total-vm, anon-rss, file-rss, shmem-rss
    time: datetime | None = None
    host: str = ""
    n: int = 0


@dataclass
class OomLog:
    events: list[OomEvent] = field(default_factory=list)

    def victims(self) -> dict[int, list[OomEvent]]:
        """pid -> the lines that name it as the OOM killer's victim (kill, choice, summary, reap)."""
        out: dict[int, list[OomEvent]] = {}
        for e in self.events:
            if e.pid is not None:  # an "invoked" or "memcg_limit" line names no victim pid
                out.setdefault(e.pid, []).append(e)
        return out

    def of(self, pid: int) -> list[OomEvent]:
        return self.victims().get(pid, [])

    @property
    def memcg_limit(self) -> list[OomEvent]:
        return [e for e in self.events if e.kind == "memcg_limit"]


def _sizes(rest: str) -> dict[str, int]:
    return {m["key"]: int(m["kb"]) for m in _SIZE.finditer(rest)}


def _uid(rest: str) -> int | None:
    m = _UID.search(rest)
    return int(m["uid"]) if m else None


def _memcg_reason(reason: str) -> bool:
    return "cgroup" in reason.lower()


def _summary(text: str) -> OomEvent | None:
    m = _SUMMARY.search(text)
    if not m:
        return None
    fields = {f["key"]: f["value"].strip() for f in _FIELD.finditer(m["fields"])}
    pid = fields.get("pid", "")
    uid = fields.get("uid", "")
    constraint = fields.get("constraint", "")
    return OomEvent(kind="summary", line=text, pid=int(pid) if pid.isdigit() else None, comm=fields.get("task", ""),
                    reason=constraint, memcg=constraint == "CONSTRAINT_MEMCG" or "oom_memcg" in fields,
                    cgroup=fields.get("oom_memcg") or fields.get("task_memcg", ""),
                    uid=int(uid) if uid.isdigit() else None)


def parse_line(text: str) -> OomEvent | None:
    """One peeled kernel-log message -> its OOM event, or None when it is none."""
    m = _KILLED.search(text)
    if m:
        why = (m["why"] or "").strip()
        rest = m["rest"]
        return OomEvent(kind="killed", line=text, pid=int(m["pid"]), comm=m["comm"], reason=why,
                        memcg=_memcg_reason(why), uid=_uid(rest), sizes_kb=_sizes(rest))
    m = _REAPED.search(text)
    if m:
        return OomEvent(kind="reaped", line=text, pid=int(m["pid"]), comm=m["comm"], sizes_kb=_sizes(m["rest"]))
    m = _CHOSEN.search(text)
    if m and (m["score"] or m["why"] or "sharing same memory" in text):  # the OOM killer's, not any "Kill process"
        why = (m["why"] or "").strip()
        return OomEvent(kind="killed" if "sharing same memory" in text else "chosen", line=text, pid=int(m["pid"]), comm=m["comm"], reason=why,
                        memcg=_memcg_reason(why), score=int(m["score"]) if m["score"] else None)
    ev = _summary(text)
    if ev is not None:
        return ev
    m = _TASK_IN.search(text)
    if m:
        return OomEvent(kind="memcg_limit", line=text, memcg=True, cgroup=m["limit"], reason="memory cgroup limit")
    m = _INVOKED.search(text)
    if m:
        return OomEvent(kind="invoked", line=text, comm=m["comm"].strip())
    return None


def parse(text: str, origin: str = "") -> OomLog:
    """Every OOM-killer line of a kernel log, in order, with its time and host when framed."""
    log = OomLog()
    for doc in frame(text, origin=origin).docs:
        for ln in doc.select(NEEDLES):
            ev = parse_line(ln.text.strip())
            if ev is not None:
                _place(ev, ln, doc.host)
                log.events.append(ev)
    return log


def _place(ev: OomEvent, ln: Line, host: str) -> None:
    ev.time, ev.host, ev.n = ln.time, ln.host or host, ln.n


def describe(events: list[OomEvent]) -> str:
    """A few words for the kill: 'out of memory (host memory), killed python (pid 4242), anon-rss 61.2 GiB'."""
    if not events:
        return ""
    kill = next((e for e in events if e.kind == "killed"), events[0])
    memcg = any(e.memcg for e in events)
    cgroup = next((e.cgroup for e in events if e.cgroup), "")
    where = f"memory cgroup limit{' of ' + cgroup if cgroup else ''}" if memcg else "host memory"
    rss = kill.sizes_kb.get("anon-rss")
    size = f", anon-rss {rss / 1048576:.1f} GiB" if rss else ""
    return f"out of memory ({where}): the kernel's OOM killer killed {kill.comm or '?'} (pid {kill.pid}){size}"

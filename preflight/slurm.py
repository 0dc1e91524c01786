"""The Slurm adapter: every scontrol/sinfo/sacct call of preflight is made here.

- node state, batched: `show_nodes` and `node_addresses` ask ONE `scontrol show node` for any
  number of nodes (a node Slurm does not know keeps its own name as its address);
- `hostnames` (a partition's or nodelist's nodes), `job_nodes` (a job's nodes and times from
  scontrol, else sacct);
- drain a node preflight found unfit, resume the nodes preflight drained, and the command
  lines (`drain_command`, `requeue_command`) preflight prints for a person to run.

Rules (the reason is the only record of who drained a node):
- preflight's reasons start with `preflight:` (`preflight: gpu.xid Xid 79 on GPU 0000:18:00 ...`);
- a node that carries a reason preflight did not set (an admin's "RMA ticket 4711") is never
  touched: not re-drained with another reason, never resumed;
- `resume` resumes only nodes whose reason starts with `preflight:`.

The parsers are pure (`scontrol show node -o` text -> `NodeInfo`); the runners are thin, with
timeouts, and never raise for a Slurm fault: they return `Action`s that say what happened.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from preflight import lazyre
from preflight.inventory import HostlistError, compress, dedupe, valid_node_name
from preflight.parsers.slurm_job import SlurmJob, parse_sacct, parse_scontrol_job
from preflight.procs import TIMED_OUT, run_bounded

PREFIX = "preflight:"
REASON_MAX = 160  # characters; Slurm keeps longer reasons, but sinfo/squeue views cut them
SCONTROL_TIMEOUT = 15.0

_KEY = lazyre.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*)=")
_REASON = lazyre.compile(r"(?:^|\s)Reason=(?P<text>.*?)(?:\s*\[(?P<user>[^\]@\s]*)@(?P<time>[^\]\s]*)\])?"
                     r"(?=\s+[A-Z][A-Za-z0-9_]*=|\s*$)")
_REASON_STAMPED = lazyre.compile(r"(?:^|\s)Reason=(?P<text>.*?)\s*\[(?P<user>[^\]@\s]*)@(?P<time>[^\]\s]*)\]")


@dataclass
class NodeInfo:
    """One node as `scontrol show node -o` describes it."""

    name: str
    state: str = ""  # the whole State= value, e.g. IDLE+DRAIN
    reason: str = ""  # without the [user@time] stamp
    reason_user: str = ""
    reason_time: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def base_state(self) -> str:
        return self.state.split("+", 1)[0].rstrip("*~#!%$@^-").upper()

    @property
    def flags(self) -> set[str]:
        return {f.upper() for f in self.state.split("+")[1:]}

    @property
    def drained(self) -> bool:
        """Draining or drained (the DRAIN flag, or the DRAINED/DRAINING base states)."""
        return "DRAIN" in self.flags or self.base_state in ("DRAIN", "DRAINED", "DRAINING")

    @property
    def down(self) -> bool:
        return self.base_state == "DOWN" or "DOWN" in self.flags

    @property
    def ours(self) -> bool:
        return is_preflight_reason(self.reason)


def is_preflight_reason(reason: str) -> bool:
    """Set by preflight: starts with `preflight:` exactly (an admin's "Preflight: ..." is theirs)."""
    return reason.strip().startswith(PREFIX)


def _records(text: str) -> list[str]:
    """One string per node: `-o` gives one line each; the long form is joined per node."""
    records: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("NodeName="):
            records.append(stripped)
        elif records:
            records[-1] += " " + stripped
    return records


def parse_node(record: str) -> NodeInfo | None:
    """One node record -> NodeInfo (None when it names no node)."""
    reason_text, user, stamp = "", "", ""
    rest = record
    m = _REASON_STAMPED.search(record) or _REASON.search(record)
    if m:
        reason_text, user, stamp = m.group("text").strip(), m.group("user") or "", m.group("time") or ""
        rest = record[: m.start()] + " " + record[m.end():]
    values: dict[str, str] = {}
    keys = list(_KEY.finditer(rest))
    for i, k in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(rest)
        values[k.group(1)] = rest[k.end(): end].strip()
    name = values.get("NodeName", "").split()[0] if values.get("NodeName") else ""
    if not name:
        return None
    if reason_text in ("(null)", "none", "None"):
        reason_text = ""
    if m:
        values["Reason"] = reason_text
    return NodeInfo(name=name, state=values.get("State", "").split()[0] if values.get("State") else "",
                    reason=reason_text, reason_user=user, reason_time=stamp, fields=values)


def parse_show_nodes(text: str) -> dict[str, NodeInfo]:
    """`scontrol show node -o [...]` output -> node name -> NodeInfo. Garbage gives {}."""
    out: dict[str, NodeInfo] = {}
    for rec in _records(text):
        info = parse_node(rec)
        if info is not None:
            out[info.name] = info
    return out


def drain_reason(check: str, summary: str, limit: int = REASON_MAX) -> str:
    """`preflight: <check> <summary>` on one line, at most `limit` characters."""
    text = " ".join(f"{PREFIX} {check} {summary}".split())
    text = text.replace("[", "(").replace("]", ")")  # keep the [user@time] stamp unambiguous
    if len(text) > limit:
        text = text[: max(len(PREFIX) + 1, limit - 3)].rstrip() + "..."
    return text


@dataclass
class Action:
    """What preflight did (or would do, in a dry run) to one node."""

    node: str
    action: str  # drain, resume, keep (left alone), error
    reason: str = ""
    message: str = ""
    done: bool = False

    def line(self, dry_run: bool = False) -> str:
        verb = f"would {self.action}" if dry_run and self.action in ("drain", "resume") else self.action
        bits = [f"{self.node}: {verb}"]
        if self.reason:
            bits.append(f"reason={self.reason!r}")
        if self.message:
            bits.append(f"({self.message})")
        return " ".join(bits)


def plan_drain(info: NodeInfo | None, node: str, reason: str) -> Action:
    """Drain unless the node carries a reason preflight did not set."""
    if info is None:
        return Action(node, "error", reason, "node unknown to Slurm (scontrol show node gave nothing)")
    if info.reason and not info.ours:
        who = f" by {info.reason_user}" if info.reason_user else ""
        return Action(node, "keep", info.reason, f"reason set{who} outside preflight is kept; not drained again")
    if info.drained and info.reason == reason:
        return Action(node, "keep", reason, "already drained by preflight with this reason")
    return Action(node, "drain", reason, "replaces an earlier preflight reason" if info.reason else "")


def plan_resume(info: NodeInfo | None, node: str) -> Action:
    """Resume only what preflight drained."""
    if info is None:
        return Action(node, "error", "", "node unknown to Slurm (scontrol show node gave nothing)")
    if not info.reason:
        state = "not drained" if not (info.drained or info.down) else "drained without a reason"
        return Action(node, "keep", "", f"{state}; nothing of preflight's to resume")
    if not info.ours:
        who = f" by {info.reason_user}" if info.reason_user else ""
        return Action(node, "keep", info.reason, f"drained{who} outside preflight; left alone")
    if not (info.drained or info.down):
        return Action(node, "keep", info.reason, f"state {info.state}: not drained")
    return Action(node, "resume", info.reason)


# ---- runners --------------------------------------------------------------------------------


class SlurmError(RuntimeError):
    """scontrol is missing, timed out or failed."""


def _say(tool: str, args: Sequence[str]) -> str:
    return " ".join([tool, *args[:3]])


def _call(args: Sequence[str], timeout: float, tool: str = "scontrol") -> tuple[int, str, str]:
    """(rc, stdout, stderr) of one Slurm client command; SlurmError when it cannot run or hangs."""
    rc, out, err = run_bounded([tool, *args], timeout)
    if rc is None:
        if TIMED_OUT in err:
            raise SlurmError(f"{_say(tool, args)} did not answer within {timeout:g} s")
        raise SlurmError(err.strip().splitlines()[-1] if err.strip() else f"cannot run {tool}")
    return rc, out, err


def _failure(tool: str, args: Sequence[str], rc: int, out: str, err: str) -> SlurmError:
    msg = (err.strip() or out.strip()).splitlines()
    return SlurmError(f"{_say(tool, args)} failed ({rc}): {msg[-1] if msg else ''}")


def _scontrol(args: Sequence[str], timeout: float, scontrol: str = "scontrol") -> str:
    rc, out, err = _call(args, timeout, scontrol)
    if rc != 0:
        raise _failure(scontrol, args, rc, out, err)
    return out


def show_nodes(nodes: Sequence[str], timeout: float = SCONTROL_TIMEOUT, scontrol: str = "scontrol") -> dict[str, NodeInfo]:
    """The nodes' state and reason: ONE `scontrol show node -o <hostlist>` for all of them.

    Nodes Slurm does not know are missing from the answer; SlurmError when scontrol cannot run,
    hangs, or fails without describing any node."""
    names = [n for n in dedupe(nodes) if valid_node_name(n)]
    if not names:
        return {}
    args = ["show", "node", "-o", compress(names)]
    rc, out, err = _call(args, timeout, scontrol)
    infos = parse_show_nodes(out)
    if rc != 0 and not infos:  # one unknown node among known ones fails the command, not the answer
        raise _failure(scontrol, args, rc, out, err)
    return infos


def node_address(info: NodeInfo | None) -> str:
    """The node's NodeAddr ("" when Slurm gave none)."""
    addr = (info.fields.get("NodeAddr") or "").split() if info else []
    return addr[0] if addr else ""


def node_addresses(nodes: Sequence[str], timeout: float = SCONTROL_TIMEOUT,
                   scontrol: str = "scontrol") -> dict[str, str]:
    """node -> the address Slurm reaches it at (NodeAddr), for any number of nodes with one
    scontrol call. A node Slurm does not know, or any Slurm fault, maps to the node's own name;
    never raises."""
    try:
        infos = show_nodes(nodes, timeout, scontrol)
    except SlurmError:
        infos = {}
    return {n: node_address(infos.get(n)) or n for n in nodes}


def _lines(text: str) -> list[str]:
    return dedupe(line.strip() for line in text.splitlines() if line.strip())


def hostnames(partition: str | None = None, nodelist: str | None = None, timeout: float = SCONTROL_TIMEOUT) -> list[str]:
    """The nodes of a Slurm nodelist (`scontrol show hostnames`) or partition (`sinfo -N`).

    Raises HostlistError (a ValueError) with a message for the user when Slurm is missing,
    does not answer, fails, returns an invalid node name or no node at all."""
    what = f"nodelist {nodelist}" if nodelist else f"partition {partition}"
    tool, args = (("scontrol", ["show", "hostnames", nodelist]) if nodelist
                  else ("sinfo", ["-h", "-N", "-o", "%N", "-p", str(partition)]))
    rc, out, err = run_bounded([tool, *args], timeout)
    if rc is None and TIMED_OUT in err:
        raise HostlistError(f"Slurm did not answer within {timeout:g} s (is slurmctld up?)")
    if rc is None:
        raise HostlistError("Slurm's scontrol/sinfo not found: give --hosts instead")
    if rc != 0:
        raise HostlistError(f"Slurm: {(err or out).strip() or 'exit ' + str(rc)}")
    names = _lines(out)
    for n in names:
        if not valid_node_name(n):
            raise HostlistError(f"Slurm returned an invalid node name {n!r}")
    if not names:
        raise HostlistError(f"no nodes in {what}")
    return names


JOB_ID = lazyre.compile(r"\d+(?:_\d+)?")
SACCT_FIELDS = "JobID,NodeList,Start,End,State,ExitCode"


def _job_query(argv: Sequence[str], parse: Callable[[str], SlurmJob], timeout: float) -> SlurmJob:
    rc, out, err = run_bounded(argv, timeout)
    if rc is None:
        cause = f"{argv[0]} did not answer within {timeout:g} s" if TIMED_OUT in err else f"{argv[0]} not found"
        return SlurmJob(problem=cause)
    if rc != 0:
        return SlurmJob(problem=(err or out).strip()[:200] or f"{argv[0]} exited {rc}")
    return parse(out)


def job_nodes(job_id: str, timeout: float = SCONTROL_TIMEOUT) -> SlurmJob:
    """A job's node list, times and state: `scontrol show job` (running or recently ended),
    else `sacct` (accounting). Never raises: without a node list, `problem` says why."""
    if not JOB_ID.fullmatch(job_id or ""):
        return SlurmJob(problem=f"job id {job_id!r}: use digits (4242 or 4242_7)")
    job = _job_query(["scontrol", "show", "job", "-o", job_id], parse_scontrol_job, timeout)
    if job.nodelist:
        return job
    acct = _job_query(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", SACCT_FIELDS], parse_sacct, timeout)
    if acct.nodelist:
        return acct
    job.problem = f"scontrol: {job.problem or 'no node list'}; sacct: {acct.problem or 'no node list'}"
    return job


def drain_command(nodes: Sequence[str], reason: str) -> str:
    """The `scontrol update` line that drains `nodes` with preflight's reason, for a person to
    run (quoted for a POSIX shell)."""
    return shlex.join(["scontrol", "update", f"NodeName={compress(nodes)}", "State=DRAIN", f"Reason={reason}"])


def requeue_command(job_id: str) -> str:
    """The `scontrol requeue` line for a person to run (`<job>` when the id is not known)."""
    return shlex.join(["scontrol", "requeue", job_id]) if JOB_ID.fullmatch(job_id or "") else "scontrol requeue <job>"


def _apply(action: Action, args: list[str], dry_run: bool, timeout: float, scontrol: str) -> Action:
    if dry_run:
        action.message = (action.message + "; " if action.message else "") + "dry run: scontrol " + " ".join(args)
        return action
    try:
        _scontrol(args, timeout, scontrol)
        action.done = True
    except SlurmError as exc:
        action.action, action.message = "error", str(exc)
    return action


def drain(node: str, check: str, summary: str, dry_run: bool = False, timeout: float = SCONTROL_TIMEOUT,
          scontrol: str = "scontrol") -> Action:
    """Drain `node` with `preflight: <check> <summary>` unless someone else's reason is on it."""
    reason = drain_reason(check, summary)
    try:
        info = show_nodes([node], timeout, scontrol).get(node)
    except SlurmError as exc:
        return Action(node, "error", reason, str(exc))
    action = plan_drain(info, node, reason)
    if action.action != "drain":
        return action
    return _apply(action, ["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"], dry_run, timeout,
                  scontrol)


def resume(nodes: Sequence[str], dry_run: bool = False, timeout: float = SCONTROL_TIMEOUT,
           scontrol: str = "scontrol") -> list[Action]:
    """Resume the nodes of `nodes` that preflight drained; leave every other node alone."""
    if not nodes:
        return []
    try:
        infos = show_nodes(nodes, timeout, scontrol)
    except SlurmError as exc:
        return [Action(n, "error", "", str(exc)) for n in nodes]
    out: list[Action] = []
    for node in nodes:
        action = plan_resume(infos.get(node), node)
        if action.action == "resume":
            action = _apply(action, ["update", f"NodeName={node}", "State=RESUME"], dry_run, timeout, scontrol)
        out.append(action)
    return out

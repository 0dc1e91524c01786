"""Slurm node state: drain a node preflight found unfit, resume the nodes preflight drained.

Rules (the reason is the only record of who drained a node):
- preflight's reasons start with `preflight:` (`preflight: gpu.xid Xid 79 on GPU 0000:18:00 ...`);
- a node that carries a reason preflight did not set (an admin's "RMA ticket 4711") is never
  touched: not re-drained with another reason, never resumed;
- `resume` resumes only nodes whose reason starts with `preflight:`.

The parsers are pure (`scontrol show node -o` text -> `NodeInfo`); the runners are thin, with
timeouts, and never raise for a Slurm fault: they return `Action`s that say what happened.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

PREFIX = "preflight:"
REASON_MAX = 160  # characters; Slurm keeps longer reasons, but sinfo/squeue views cut them
SCONTROL_TIMEOUT = 15.0

_KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*)=")
_REASON = re.compile(r"(?:^|\s)Reason=(?P<text>.*?)(?:\s*\[(?P<user>[^\]@\s]*)@(?P<time>[^\]\s]*)\])?"
                     r"(?=\s+[A-Z][A-Za-z0-9_]*=|\s*$)")
_REASON_STAMPED = re.compile(r"(?:^|\s)Reason=(?P<text>.*?)\s*\[(?P<user>[^\]@\s]*)@(?P<time>[^\]\s]*)\]")


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


def _scontrol(args: Sequence[str], timeout: float, scontrol: str = "scontrol") -> str:
    if shutil.which(scontrol) is None:
        raise SlurmError(f"{scontrol} not found on PATH")
    try:
        p = subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{scontrol} {' '.join(args[:3])} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise SlurmError(f"cannot run {scontrol}: {exc.strerror or exc}") from None
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        raise SlurmError(f"{scontrol} {' '.join(args[:3])} failed ({p.returncode}): {msg[-1] if msg else ''}")
    return p.stdout


def show_nodes(nodes: Sequence[str], timeout: float = SCONTROL_TIMEOUT, scontrol: str = "scontrol") -> dict[str, NodeInfo]:
    """The nodes' state and reason (`scontrol show node -o <nodes>`)."""
    from preflight.inventory import compress

    return parse_show_nodes(_scontrol(["show", "node", "-o", compress(nodes)], timeout, scontrol))


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

"""hang.watchdog, the flight recorder's part: what `fr_trace` / `torchfrtrace` concluded from the
ranks' dumps (the facts of `preflight.parsers.flight_recorder`).

Its findings name the ranks to suspect: those missing from a collective the others entered,
those whose collective differs from their peers' (type, sizes, dtypes, state), and in the `-j`
view the ranks whose column of entries ends early.
"""

from __future__ import annotations

from typing import Any

from preflight.findings import Findings
from preflight.parsers.flight_recorder import FrText, FRTraceFinding, SideBySide

REMEDY = ("the named rank(s) never entered that collective: read their logs and py-spy stacks (hung in a data "
          "loader, a host-side deadlock, a crashed process) and check their node (Xid, NIC); `preflight triage` "
          "collects both")
_REMEDY_MISMATCH = ("the ranks called different collectives (type, sizes or dtypes) at the same sequence number: an "
                    "application bug, a code path some ranks took and others did not (a rank-dependent branch, "
                    "uneven data, a conditional barrier); the stack traces of the entries show where")
_REMEDY_DUMPS = ("ranks without a dump died or hung before writing it (TORCH_NCCL_DUMP_ON_TIMEOUT, "
                 "TORCH_NCCL_DEBUG_INFO_TEMP_FILE): read their logs and their node's kernel log first")
_STATE = "COLLECTIVE_STATE_MISMATCH"
_QUOTE = 10  # pragma: no mutate - lines of a finding quoted as evidence, a display limit
_FEW = 4  # pragma: no mutate - lines quoted for a finding without fields, a display limit
_NAMED = 3  # pragma: no mutate - culprits named in a summary, a display limit


def _plural(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _where(x: FRTraceFinding) -> str:
    seq = f" sequence number {x.seq}" if x.seq is not None else ""
    return f"{x.op or 'the collective'}{seq}" + (f" of group {x.group}" if x.group else "")


def _fill(facts: dict[str, Any], key: str, val: Any) -> None:
    """A fact the log did not give already (a watchdog timeout's SeqNum comes first)."""
    if facts.get(key) is None:
        facts[key] = val


def _missing(x: FRTraceFinding, f: Findings, facts: dict[str, Any]) -> None:
    expected = f" (expected ranks {x.expected_ranks})" if x.expected_ranks else (
        f" (world size {x.world_size})" if x.world_size else "")
    f.add("hang.watchdog/fr-missing-ranks",
          f"flight recorder: {_plural(x.missing_ranks)} did not join {_where(x)}{expected}", x.lines[:_QUOTE], REMEDY)
    for key, val in (("missing_ranks", x.missing_ranks), ("seq", x.seq), ("op", x.op or None),
                     ("group", x.group or None), ("expected_ranks", x.expected_ranks), ("world_size", x.world_size)):
        _fill(facts, key, val)


def _errors(x: FRTraceFinding, f: Findings, facts: dict[str, Any]) -> None:
    culprits = [r for r, _ in x.culprits]
    kinds = sorted({t.partition(" ")[0] for _, t in x.culprits})
    if x.kind == "size":
        what = "input/output sizes do not add up across ranks"
    elif culprits:
        what = "; ".join(f"rank {r}: {t}" for r, t in x.culprits[:_NAMED])
    else:
        what = "errors"
    state_only = bool(kinds) and kinds == [_STATE]
    code = "hang.watchdog/fr-state-mismatch" if state_only else "hang.watchdog/fr-collective-mismatch"
    remedy = REMEDY if state_only else _REMEDY_MISMATCH
    f.add(code, f"flight recorder: {_where(x)} has errors ({what})", x.lines[:_QUOTE], remedy)
    _fill(facts, "seq", x.seq)
    _fill(facts, "culprit", culprits[0] if culprits else None)
    _fill(facts, "culprits", culprits)


def _undecided(x: FRTraceFinding, f: Findings, facts: dict[str, Any]) -> None:
    f.add("hang.watchdog/fr-dumps-missing",
          f"flight recorder: no dump from {_plural(x.missing_ranks)}, fr_trace could not decide" if x.missing_ranks
          else "flight recorder: dumps are missing, fr_trace could not decide", x.lines[:_FEW], _REMEDY_DUMPS)
    _fill(facts, "no_dump_ranks", x.missing_ranks)


def _behind(sbs: SideBySide, f: Findings, facts: dict[str, Any]) -> None:
    counts = {r: len(sbs.entries[r]) for r in sbs.ranks}
    most = max(counts.values())
    lead = next(r for r in sbs.ranks if counts[r] == most)
    first = sbs.behind[0]
    nxt = sbs.entries[lead][counts[first]]
    f.add("hang.watchdog/fr-rank-behind",
          f"flight recorder: {_plural(sbs.behind)} entered {counts[first]} collective(s), rank {lead} {most}: "
          f"the next one ({nxt}) was never joined",
          [sbs.header, *[f"rank {r}: {n} entries" for r, n in counts.items()]], REMEDY, proof=f"rank {first}: ")
    facts.update(entries=counts, behind=sbs.behind)


def grade_fr(fr: FrText, f: Findings, facts: dict[str, Any]) -> None:
    """The findings of `fr_trace` text (and its `-j` view) added to `f`."""
    for x in fr.findings:
        if x.kind == "missing":
            _missing(x, f, facts)
        elif x.kind in ("errors", "size"):
            _errors(x, f, facts)
        elif x.kind in ("undecided", "dumps_missing"):
            _undecided(x, f, facts)
        else:
            f.add("hang.watchdog/fr-no-mismatch", "flight recorder: fr_trace found no mismatch in a collective",
                  x.lines[:_FEW])
    sbs = fr.side_by_side
    if sbs is not None and sbs.behind:
        _behind(sbs, f, facts)
    elif sbs is not None:
        _fill(facts, "ranks", sbs.ranks)


def fr_ok_summary(fr: FrText) -> str:
    n = len(fr.side_by_side.ranks) if fr.side_by_side is not None else 0
    if n:
        return f"flight recorder: all {n} rank(s) entered the same collectives"
    return "flight recorder: fr_trace found no mismatch"


__all__ = ["REMEDY", "fr_ok_summary", "grade_fr"]

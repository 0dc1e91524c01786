"""Every entry of every producer inventory (`preflight/parsers/*.inventory.toml`), in every
framing `preflight.framing` peels, graded by `preflight analyze` from standard input.

An inventory lists what a producer (NCCL, PyTorch, the NVIDIA driver, nvidia-smi, ...) can
print that a check relies on, each entry with the source it was read from, the versions, a
sample in the producer's real format (written by this project), the check that grades it and
the finding codes that grading the sample alone must give ([] means: graded, nothing found).
An entry may leave out a framing only by naming it with a reason (`skip_framings`).
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight import policy
from preflight.analyze import analyze
from preflight.model import Result, Status
from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

INVENTORIES = sorted((ROOT / "preflight" / "parsers").glob("*.inventory.toml"))
ENTRY_FIELDS = {"id", "message", "source", "versions", "sample", "check", "codes", "profile", "status",
                "summary_contains", "skip_framings", "command", "notes"}
HEAD_FIELDS = {"producer", "repository", "versions", "parser", "notes", "entry"}
HOST = "gpu017"


def _each(prefix: Callable[[int, str], str]) -> Callable[[list[str]], list[str]]:
    return lambda lines: [prefix(i, ln) for i, ln in enumerate(lines)]


# How operators hand us the producer's lines: each framing `preflight.framing` peels.
FRAMINGS: dict[str, Callable[[list[str]], list[str]]] = {
    "plain": lambda lines: lines,
    "prompt": lambda lines: [f"[root@{HOST} ~]# <command>", *lines, f"[root@{HOST} ~]# "],
    "srun-label": _each(lambda i, ln: f"0: {ln}"),
    "pdsh": _each(lambda i, ln: f"{HOST}: {ln}"),
    "mpirun-tag": _each(lambda i, ln: f"[1,0]<stdout>:{ln}"),
    "torchrun": _each(lambda i, ln: f"[default0]:{ln}"),
    "syslog": _each(lambda i, ln: f"Nov 25 10:11:{i % 60:02d} {HOST} kernel: {ln}"),
    "journal-iso": _each(lambda i, ln: f"2026-11-25T10:11:{i % 60:02d}+0000 {HOST} kernel: {ln}"),
    "dmesg": _each(lambda i, ln: f"[ 8123.{i:06d}] {ln}"),
    "dmesg-T": _each(lambda i, ln: f"[Wed Nov 25 10:11:{i % 60:02d} 2026] {ln}"),
    "iso-stamp": _each(lambda i, ln: f"2026-11-25T10:11:{i % 60:02d}.123456Z {ln}"),
    "quote": _each(lambda i, ln: f"> {ln}"),
    "markdown-fence": lambda lines: ["```", *lines, "```"],
    "ansi": _each(lambda i, ln: f"\x1b[0m{ln}\x1b[0m"),
    "crlf": _each(lambda i, ln: ln + "\r"),
}


def _load(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _entries() -> list[tuple[str, str, dict]]:
    out = []
    for path in INVENTORIES:
        doc = _load(path)
        for e in doc.get("entry", []):
            out.append((path.name, str(e.get("id", "?")), e))
    return out


ENTRIES = _entries()


def _text(entry: dict, framing: str) -> str:
    lines = entry["sample"].strip("\n").split("\n")
    return "\n".join(FRAMINGS[framing](lines)) + "\n"


def _grade(text: str, profile: str) -> list[Result]:
    from preflight import registry

    return analyze(registry.load(), [Path("-")], profile_name=profile, stdin=io.BytesIO(text.encode()))


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.name)
def test_inventory_is_well_formed(path: Path) -> None:
    doc = _load(path)
    assert set(doc) <= HEAD_FIELDS, f"{path.name}: unknown fields {set(doc) - HEAD_FIELDS}"
    for key in ("producer", "repository", "versions", "parser"):
        assert str(doc.get(key, "")).strip(), f"{path.name}: {key} missing"
    assert (ROOT / doc["parser"]).is_file() or all((ROOT / p.strip()).is_file() for p in doc["parser"].split(",")), \
        f"{path.name}: parser {doc['parser']} is not a file of the project"
    ids = [e.get("id") for e in doc.get("entry", [])]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate entry ids"
    known = policy.builtin().codes
    for e in doc.get("entry", []):
        where = f"{path.name}:{e.get('id')}"
        assert set(e) <= ENTRY_FIELDS, f"{where}: unknown fields {set(e) - ENTRY_FIELDS}"
        for key in ("id", "message", "source", "versions", "sample", "check"):
            assert str(e.get(key, "")).strip(), f"{where}: {key} missing"
        assert isinstance(e.get("codes"), list), f"{where}: codes must be a list ([] = graded, nothing found)"
        for c in e["codes"]:
            assert c in known, f"{where}: code {c} is not in the policy table"
        for name, why in e.get("skip_framings", {}).items():
            assert name in FRAMINGS, f"{where}: skip_framings names unknown framing {name}"
            assert len(str(why)) > 15, f"{where}: skip_framings.{name} needs a reason"
        assert re.search(r"\d", e["versions"]), f"{where}: versions must name versions"


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize(("inventory", "entry_id", "entry"), ENTRIES or [("none", "none", {})],
                         ids=[f"{i}:{e}" for i, e, _ in ENTRIES] or ["no-inventory"])
def test_entry_in_framing(inventory: str, entry_id: str, entry: dict, framing: str) -> None:
    if not entry:
        pytest.skip("no inventory yet")
    if framing in entry.get("skip_framings", {}):
        pytest.skip(f"{framing}: {entry['skip_framings'][framing]}")
    results = _grade(_text(entry, framing), entry.get("profile", "auto"))
    mine = [r for r in results if r.check == entry["check"]]
    seen = [(r.check, r.status.value, r.summary[:160]) for r in results]
    assert mine, f"{inventory}:{entry_id} [{framing}]: no {entry['check']} result; got {seen}"
    own = [Status(r.facts.get("own_status", r.status.value)) for r in mine]
    codes = {c for r in mine for c in r.facts.get("codes", [])}
    want = set(entry["codes"])
    if want:
        assert want <= codes, f"{inventory}:{entry_id} [{framing}]: want codes {sorted(want)}, got {sorted(codes)}; {seen}"
    else:
        assert all(s in (Status.PASS,) for s in own), \
            f"{inventory}:{entry_id} [{framing}]: want a clean PASS, got {seen}"
    if "status" in entry:
        assert entry["status"] in {s.value for s in own}, f"{inventory}:{entry_id} [{framing}]: {seen}"
    summary = " ".join(r.summary for r in mine).lower()
    for needle in entry.get("summary_contains", []):
        assert needle.lower() in summary, f"{inventory}:{entry_id} [{framing}]: {needle!r} not in {summary!r}"

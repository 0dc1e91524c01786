"""The severity policy: every finding a grader can emit has a stable code, and one table gives
each code its status, what it means, why it has that status and the document it follows.

Codes are `<check>/<finding>` (`nccl.transport/socket-fallback`, `gpu.inventory/mig-enabled`).
The table is data: `checks/policy.toml` in the package, plus any table a site check folder
brings (`policy.toml` next to its checks). A grader names a code; the status comes from here:
the table's, or the site's where its config says so (`finding_status` in the config file). A
result carries its codes (`facts["codes"]`), so alerts can key on them, and says when a site
changed a code's status (`facts["overrides"]` and an evidence line).

The rule the table follows: the conclusion a senior cluster engineer reaches from the capture
alone. Where a capture proves the job failed or the node cannot train, FAIL.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight import lazyre
from preflight.model import Status

if sys.version_info >= (3, 11):  # pragma: no mutate (3.11 and later: > and >= agree)
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CODE_RE = lazyre.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+/[a-z0-9]+(?:-[a-z0-9]+)*$")
FIELDS = {"status": "pass, warn, fail, skip or error", "means": "what the finding is, one sentence",
          "reason": "why it has this status", "source": "the vendor document or source it follows"}


class PolicyError(Exception):
    """A malformed policy table or an unknown code in a site's overrides."""


class UnknownCode(KeyError):
    """A grader named a code the table does not have (a bug: the table and the graders disagree)."""


@dataclass(frozen=True)
class Code:
    code: str
    status: Status
    means: str
    reason: str
    source: str
    origin: str = ""  # the table file it came from

    @property
    def check(self) -> str:
        return self.code.split("/", 1)[0]  # pragma: no mutate (a code has one slash: maxsplit 1 or 2 agree)


@dataclass(frozen=True)
class Override:
    status: Status
    origin: str  # the config file that set it


def packaged_tables() -> list[Path]:
    """The table shipped with the checks (`preflight.checks` is the repository's `checks/`):
    `policy.toml`, one file for every family of checks."""
    import preflight.checks as pkg

    base = Path(pkg.__file__).resolve().parent
    return [base / "policy.toml"]


_SIMPLE_HEADER = lazyre.compile(r'\["([^"\\\x00-\x08\x0a-\x1f\x7f]+)"\]|\[([A-Za-z0-9_-]+)\]')
_CONTROL = lazyre.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")
_SIMPLE_PAIR = lazyre.compile(r'([A-Za-z0-9_-]+)[ \t]*=[ \t]*"((?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\.)*)"')


def _simple_toml(text: str) -> dict[str, Any] | None:
    """The table read line by line when it is written in the plain shape of the packaged one
    (comments, blank lines, `["code"]` headers, `key = "string"` lines under a header, each
    table and key once); None for anything else, which `tomllib` then reads. A string with an
    escape is decoded by `tomllib` itself, its line alone. The packaged table is 200 KB that
    every node and prologue run loads: this reads it in a fraction of tomllib's time."""
    if _CONTROL.search(text):  # TOML allows no other control character, even in a comment
        return None
    data: dict[str, Any] = {}
    table: dict[str, Any] | None = None
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if not line or line.startswith("#"):
            continue
        m = _SIMPLE_PAIR.fullmatch(line)
        if m is not None:
            key, value = m.group(1), m.group(2)
            if table is None or key in table:
                return None
            if "\\" in value:
                try:
                    value = tomllib.loads(line)[key]
                except tomllib.TOMLDecodeError:
                    return None
            table[key] = value
            continue
        m = _SIMPLE_HEADER.fullmatch(line)
        if m is None:
            return None
        name = m.group(1) or m.group(2)
        if name in data:
            return None
        table = data[name] = {}
    return data


def parse_table(text: str, origin: str) -> dict[str, Code]:
    """Codes from one TOML table; a PolicyError naming the code and the field when malformed."""
    data = _simple_toml(text)
    if data is None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"{origin}: {exc}") from None
    out: dict[str, Code] = {}
    for code, entry in data.items():
        if not CODE_RE.match(code):
            raise PolicyError(f"{origin}: {code!r} is not a code (<check>/<finding>, lower case and dashes)")
        if not isinstance(entry, dict):
            raise PolicyError(f"{origin}: {code} must be a table with {', '.join(FIELDS)}")
        unknown = set(entry) - set(FIELDS)
        if unknown:
            raise PolicyError(f"{origin}: {code}: unknown field {sorted(unknown)[0]!r} (fields: {', '.join(FIELDS)})")
        for name, what in FIELDS.items():
            value = entry.get(name)
            if not isinstance(value, str) or not value.strip():
                raise PolicyError(f"{origin}: {code}: {name} must be {what}")
        try:
            status = Status(entry["status"].strip().lower())
        except ValueError:
            raise PolicyError(f"{origin}: {code}: status {entry['status']!r} is not {FIELDS['status']}") from None
        out[code] = Code(code, status, entry["means"].strip(), entry["reason"].strip(), entry["source"].strip(),
                         origin)
    return out


class Policy:
    """The code table and the site's overrides."""

    def __init__(self, codes: Mapping[str, Code], overrides: Mapping[str, Override] | None = None) -> None:
        self.codes = dict(codes)
        self.overrides = dict(overrides or {})

    def entry(self, code: str) -> Code:
        try:
            return self.codes[code]
        except KeyError:
            raise UnknownCode(f"finding code {code!r} is not in the policy table") from None

    def status(self, code: str) -> Status:
        """The status a finding of this code gets here: the site's, else the table's."""
        default = self.entry(code).status
        o = self.overrides.get(code)
        return o.status if o is not None else default

    def override(self, code: str) -> Override | None:
        """The site's override of this code, when it changes the table's status."""
        o = self.overrides.get(code)
        return o if o is not None and o.status is not self.entry(code).status else None

    def for_check(self, check: str) -> list[Code]:
        return [c for k, c in sorted(self.codes.items()) if c.check == check]

    def with_overrides(self, overrides: Mapping[str, str], origin: str) -> Policy:
        """This policy with a site's `{code: status}`; a PolicyError naming an unknown code or status."""
        import difflib

        out = dict(self.overrides)
        for code, value in overrides.items():
            if code not in self.codes:
                close = difflib.get_close_matches(code, list(self.codes), n=1)  # pragma: no mutate (the best is first)
                hint = f" (did you mean {close[0]}?)" if close else " (see `preflight explain`)"
                raise PolicyError(f"{origin}: finding_status names unknown code {code!r}{hint}")
            try:
                status = Status(str(value).strip().lower())
            except ValueError:
                raise PolicyError(f"{origin}: finding_status.{code} = {value!r}: give {FIELDS['status']}") from None
            out[code] = Override(status, origin)
        return Policy(self.codes, out)


def load(extra_tables: Iterable[Path] = ()) -> Policy:
    """The packaged table plus the tables of site check folders."""
    codes: dict[str, Code] = {}
    for path in [*packaged_tables(), *extra_tables]:
        if not path.is_file():
            continue
        for code, c in parse_table(path.read_text(encoding="utf-8"), str(path)).items():
            if code in codes:
                raise PolicyError(f"{path}: {code} is already defined in {codes[code].origin}")
            codes[code] = c
    return Policy(codes)


_BUILTIN: Policy | None = None
_ACTIVE: contextvars.ContextVar[Policy | None] = contextvars.ContextVar(
    "preflight_policy", default=None)  # pragma: no mutate (the variable's name is only shown in its repr)


def builtin() -> Policy:
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = load()
    return _BUILTIN


def active() -> Policy:
    """The policy graders use now: the one a command installed (`use`), else the built-in table."""
    return _ACTIVE.get() or builtin()


def use(policy: Policy | None) -> contextvars.Token[Policy | None]:
    """Install a policy (a site's overrides, a site folder's codes); None goes back to the table."""
    return _ACTIVE.set(policy)


def reset(token: contextvars.Token[Policy | None]) -> None:
    _ACTIVE.reset(token)


def status(code: str) -> Status:
    return active().status(code)


def override_line(code: str, o: Override, default: Status) -> str:
    return f"site policy: {code} is {o.status.value.upper()} here (table: {default.value.upper()}; {o.origin})"


def code_facts(codes: Iterable[str], facts: dict[str, Any], evidence: list[str], passed: Iterable[str] = ()) -> None:
    """Record a result's finding codes in its facts (`codes`), and each site override among
    them and among `passed` (codes a site turned into PASS) as a fact (`overrides`) and an
    evidence line."""
    found = [c for c in dict.fromkeys(codes) if c]
    if found:
        facts["codes"] = list(dict.fromkeys([*facts.get("codes", []), *found]))
    pol = active()
    for c in dict.fromkeys([*found, *passed]):
        o = pol.override(c)
        if o is None:
            continue
        default = pol.entry(c).status
        facts.setdefault("overrides", {})[c] = f"{default.value} -> {o.status.value} ({o.origin})"
        line = override_line(c, o, default)
        if line not in evidence:
            evidence.append(line)


__all__ = ["Code", "code_facts", "override_line", "Override", "Policy", "PolicyError", "UnknownCode", "active", "builtin", "load", "parse_table",
           "reset", "status", "use"]

"""Inventory: which nodes to check. THE hostlist module: expand, compress, validate, set algebra.

Slurm hostlist syntax (`gpu[001-016,020],login1`, several bracket groups per name,
zero-padded ranges), comma lists, `@file` (one host or hostlist per line, `#` comments),
`^` to take hosts away (`gpu[01-64]^gpu[03,07]`, `@rack.txt^@broken.txt`),
`SLURM_JOB_NODELIST` inside an allocation. Malformed input raises `HostlistError` with the
offending part; duplicates are removed with the order kept. Node names are validated
(`valid_node_name`, `check_name`: the one validator), since they end up in commands (ssh,
srun, ping). Asking Slurm for a partition's nodes is the Slurm adapter's (`slurm.hostnames`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from preflight import lazyre

MAX_HOSTS = 100_000

# RFC 1123 labels (letters, digits, hyphen; underscores tolerated as sites use them), dotted.
_NAME = lazyre.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*$")
_IPV4 = lazyre.compile(r"^(?:\d{1,3}\.){3}\d{1,3}$")


class HostlistError(ValueError):
    """A hostlist that cannot be expanded; the message names the bad part."""


def valid_node_name(name: str) -> bool:
    """A host name or IPv4 address that is safe to pass as one argv element."""
    if _IPV4.match(name):
        return all(0 <= int(x) <= 255 for x in name.split("."))
    return bool(_NAME.match(name)) and not name.startswith("-")


def check_name(name: str) -> str:
    """`name` itself when it is a plain host name or IPv4 address (safe as one argv element);
    else HostlistError. The one node-name validator."""
    if not isinstance(name, str) or not valid_node_name(name):
        raise HostlistError(f"node name {name!r} is not a plain host name")
    return name


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in {text!r}")
    parts.append("".join(cur))
    return parts


def _expand_range(spec: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            raise HostlistError(f"empty range item in {whole!r}")
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise HostlistError(f"bad range {item!r} in {whole!r} (expected N or N-M)")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"descending range {item!r} in {whole!r}")
        if hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(f"range {item!r} in {whole!r} has more than {MAX_HOSTS} hosts")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(pattern: str) -> list[str]:
    names = [""]
    pos = 0
    for m in re.finditer(r"\[([^\[\]]*)\]", pattern):
        prefix = pattern[pos : m.start()]
        choices = _expand_range(m.group(1), pattern)
        names = [n + prefix + c for n in names for c in choices]
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"{pattern!r} expands to more than {MAX_HOSTS} hosts")
        pos = m.end()
    names = [n + pattern[pos:] for n in names]
    for n in names:
        if not valid_node_name(n):
            raise HostlistError(f"invalid host name {n!r} (from {pattern!r})")
    return names


def _split_minus(text: str) -> list[str]:
    """Split on `^` outside brackets: the first term, then the terms taken away from it."""
    terms: list[str] = [""]
    depth = 0
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "^" and depth == 0:
            terms.append("")
        else:
            terms[-1] += ch
    return terms


def _expand_plain(text: str, whole: str) -> list[str]:
    """A comma list of host patterns (no `^`)."""
    if not text:
        raise HostlistError(f"empty term in hostlist {whole!r} (nothing before or after a '^')")
    out: list[str] = []
    for part in _split_top(text):
        if not part:
            raise HostlistError(f"empty element in hostlist {whole!r}")
        out.extend(_expand_one(part))
    return out


def _subtract(terms: list[list[str]], whole: str) -> list[str]:
    """The first term's hosts without those of every later term; an empty result is an error."""
    names = dedupe(terms[0])
    for term in terms[1:]:
        names = difference(names, term)
    if not names:
        raise HostlistError(f"hostlist {whole!r} leaves no host once the '^' terms are taken away")
    return names


def expand(hostlist: str) -> list[str]:
    """Expand a Slurm-style hostlist into node names, duplicates removed, order kept.

    `^` takes hosts away: `gpu[01-64]^gpu[03,07]` is gpu01..gpu64 without gpu03 and gpu07;
    each `^` term (itself a comma list) is subtracted from what comes before it."""
    text = hostlist.strip()
    if not text:
        raise HostlistError("empty hostlist")
    if any(c.isspace() for c in text):
        raise HostlistError(f"whitespace inside hostlist {hostlist!r}")
    _split_top(text.replace("^", ","))  # bracket errors first, for the whole text
    terms = _split_minus(text)
    expanded = [_expand_plain(term, hostlist) for term in terms]
    return _subtract(expanded, hostlist) if len(terms) > 1 else dedupe(expanded[0])


def union(*groups: Iterable[str]) -> list[str]:
    """Every host of the groups, once each, in first-seen order."""
    return dedupe(name for group in groups for name in group)


def difference(names: Iterable[str], remove: Iterable[str]) -> list[str]:
    """The hosts of `names` not in `remove`, order kept, once each."""
    gone = set(remove)
    return [n for n in dedupe(names) if n not in gone]


def dedupe(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def from_file(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HostlistError(f"cannot read host file {path}: {exc}") from None
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            for token in line.split():
                out.extend(expand(token))
        except HostlistError as exc:
            raise HostlistError(f"{path}:{n}: {exc}") from None
    if not out:
        raise HostlistError(f"host file {path} lists no hosts")
    return dedupe(out)


def _hosts_term(term: str, whole: str) -> list[str]:
    if term.startswith("@"):
        return from_file(Path(term[1:]))
    return _expand_plain(term, whole)


def parse_hosts(spec: str) -> list[str]:
    """`--hosts` value: a hostlist, or `@file`, with `^` terms (hostlists or `@file`s) taken
    away: `@rack3.txt^gpu[07,12]`, `gpu[01-64]^@broken.txt`."""
    spec = spec.strip()
    if "@" not in spec:
        return expand(spec)
    if not spec:
        raise HostlistError("empty hostlist")
    terms = [t.strip() for t in _split_minus(spec)]
    expanded = [_hosts_term(term, spec) for term in terms]
    return _subtract(expanded, spec) if len(terms) > 1 else dedupe(expanded[0])


def from_environment(env: dict[str, str] | None = None) -> list[str] | None:
    """The allocation's nodes inside Slurm (`SLURM_JOB_NODELIST`), else None."""
    env = dict(os.environ) if env is None else env
    value = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return expand(value) if value else None


# a name's trailing number: the part a Slurm hostlist brackets (gpu[001-003], rack1-node[01-04]);
# Slurm (22.05) accepts no suffix after a bracket, so a name not ending in digits is never bracketed
_NUMBERED = lazyre.compile(r"(.*?)(\d+)")


def _ranges(nums: list[int], width: int) -> str:
    """Sorted distinct numbers -> `1-3,7` (each zero-padded to `width`)."""
    out: list[str] = []
    start = prev = nums[0]
    for x in nums[1:] + [-1]:
        if x == prev + 1:
            prev = x
            continue
        a, b = str(start).zfill(width), str(prev).zfill(width)
        out.append(a if start == prev else f"{a}-{b}")
        start = prev = x
    return ",".join(out)


def _padded(digits: str) -> bool:
    return len(digits) > 1 and digits.startswith("0")


def _group_key(prefix: str, digits: str, padded: set[tuple[str, int]]) -> tuple[str, int]:
    """The group a numbered name belongs to: zero-padded numbers by their width; an unpadded
    number as wide as a padded group of the same prefix joins it (n09,n10 -> n[09-10])."""
    if _padded(digits) or (prefix, len(digits)) in padded:
        return (prefix, len(digits))
    return (prefix, 0)


def compress(names: Iterable[str]) -> str:
    """The inverse of `expand`, in the form Slurm accepts (`scontrol show hostnames`, `srun -w`,
    `sbatch --exclude`): gpu001,gpu002,gpu003,gpu007 -> gpu[001-003,007].

    Exact: `expand(compress(x))` gives the same hosts as x. Zero padding is kept (a padded
    group and unpadded names are separate groups: n[01-02],n[1-2]); only a name's trailing
    number is bracketed (rack1-node[01-04]); a name without a trailing number, or the only
    name of its group, is written as it is. Groups keep the order they are first seen in, and
    names without a trailing number follow them."""
    unique = dedupe(names)
    numbered = [(n, _NUMBERED.fullmatch(n)) for n in unique]
    padded = {(m.group(1), len(m.group(2))) for _, m in numbered if m and _padded(m.group(2))}
    groups: dict[tuple[str, int], list[int]] = {}
    singles: list[str] = []
    for n, m in numbered:
        if m is None:
            singles.append(n)
            continue
        groups.setdefault(_group_key(m.group(1), m.group(2), padded), []).append(int(m.group(2)))
    parts: list[str] = []
    for (prefix, width), found in groups.items():
        nums = sorted(set(found))
        if len(nums) == 1:
            parts.append(f"{prefix}{str(nums[0]).zfill(width)}")
        else:
            parts.append(f"{prefix}[{_ranges(nums, width)}]")
    return ",".join(parts + singles)


def ring_peers(nodes: list[str]) -> dict[str, list[str]]:
    """Each node's ring neighbours (previous and next): every link is tested from both ends,
    so the node common to the failing links is the culprit."""
    n = len(nodes)
    if n < 2:
        return {x: [] for x in nodes}
    out: dict[str, list[str]] = {}
    for i, node in enumerate(nodes):
        out[node] = dedupe([nodes[(i + 1) % n], nodes[(i - 1) % n]])
        out[node] = [p for p in out[node] if p != node]
    return out


def all_pairs(nodes: list[str]) -> dict[str, list[str]]:
    return {x: [y for y in nodes if y != x] for x in nodes}

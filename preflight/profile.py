"""Profiles: expected values as TOML, each threshold with its provenance.

A value is either plain (`count = 8`) or a table with its source
(`count = { value = 8, source = "NVIDIA HGX H100 datasheet" }`). Profiles may `extends`
another one. Loading validates syntax and types; any problem is a `ProfileError` with a
message an operator can act on (the CLI turns it into exit code 2).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

def builtin_dir() -> Path:
    """The folder of the built-in profiles (source tree or installed package)."""
    import preflight.checks as pkg

    return Path(pkg.__file__).resolve().parent / "profiles"


class ProfileError(Exception):
    """A profile that cannot be used: unreadable, bad TOML, wrong types, unknown parent."""


_MISSING = object()


@dataclass
class Profile:
    name: str
    description: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # flat dotted keys -> value
    sources: dict[str, str] = field(default_factory=dict)  # dotted key -> provenance
    match: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def has(self, key: str) -> bool:
        return key in self.values

    def source(self, key: str) -> str:
        return self.sources.get(key, "")

    def section(self, prefix: str) -> dict[str, Any]:
        """All keys under `prefix.` with the prefix removed."""
        p = prefix + "."
        return {k[len(p) :]: v for k, v in self.values.items() if k.startswith(p)}

    def requires_tool(self, tool: str) -> bool:
        return tool in (self.get("tools.required") or [])


def _flatten(table: Mapping[str, Any], prefix: str, values: dict[str, Any], sources: dict[str, str]) -> None:
    for key, val in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(val, Mapping):
            if "value" in val and set(val) <= {"value", "source", "note"}:
                values[dotted] = val["value"]
                if "source" in val:
                    sources[dotted] = str(val["source"])
            else:
                _flatten(val, dotted + ".", values, sources)
        else:
            values[dotted] = val


def _type_name(t: Any) -> str:
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    return {int: "integer", float: "number", str: "string", bool: "true/false", list: "list"}.get(t, str(t))


def base_schema() -> dict[str, Any]:
    """Types every profile must keep: those of the built-in `generic` profile's values."""
    try:
        generic = load("generic")
    except ProfileError:
        return {}
    schema: dict[str, Any] = {}
    for key, val in generic.values.items():
        t = type(val)
        schema[key] = (int, float) if t is float else t
    return schema


METADATA_KEYS = frozenset({"source", "note", "description"})  # provenance written beside values
LEARNED_PREFIX = "learned_"  # values `preflight baseline learn` records for people, never graded


def _accepted(key: str, schema: Mapping[str, Any]) -> bool:
    """A key no check declares that is still part of a profile: provenance metadata
    (`[nccl.allreduce] source = ...`), a learned informational value, or an entry of a table
    value written as a sub-table (`[nvlink.model_links] "H100 SXM" = 18`)."""
    parts = key.split(".")
    if parts[-1] in METADATA_KEYS or parts[-1].startswith(LEARNED_PREFIX):
        return True
    for i in range(len(parts) - 1, 0, -1):
        expected = schema.get(".".join(parts[:i]))
        if expected is not None:
            return expected is dict or (isinstance(expected, tuple) and dict in expected)
    return False


def _unknown(key: str, schema: Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(schema), n=1, cutoff=0.75)
    return f"unknown key {key}" + (f" (did you mean {close[0]}?)" if close else "")


def _type_problem(key: str, val: Any, expected: Any) -> str | None:
    types = expected if isinstance(expected, tuple) else (expected,)
    if float in types and isinstance(val, int) and not isinstance(val, bool):
        return None
    if (isinstance(val, bool) and bool not in types) or not isinstance(val, types):
        return f"{key} = {val!r}: expected {_type_name(expected)}"
    return None


def validate(profile: Profile, schema: Mapping[str, Any]) -> None:
    """Check every key against the checks' declared keys and the generic profile's value
    types: a wrong type, or a key that nothing declares (a misspelling such as gpu.cuont),
    is a ProfileError listing every problem. Provenance metadata (`source`, `note`,
    `description`), learned informational values (`learned_*`) and entries of table values
    are accepted."""
    schema = {**base_schema(), **schema}
    problems = []
    for key, val in profile.values.items():
        expected = schema.get(key)
        if expected is None:
            if not _accepted(key, schema):
                problems.append(_unknown(key, schema))
            continue
        problem = _type_problem(key, val, expected)
        if problem:
            problems.append(problem)
    if problems:
        raise ProfileError(f"profile {profile.name} ({profile.path}): " + "; ".join(problems))


_TOML_CACHE: dict[str, dict[str, Any]] = {}  # a profile file's text -> the TOML parsed


def _fresh(value: Any) -> Any:
    """A copy of parsed TOML that the caller may change (tables and arrays new, scalars shared)."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value


def _read_toml(path: Path) -> dict[str, Any]:
    """The file parsed. One run loads the same profiles many times: the file is read each time
    (a rewrite is always seen, whatever its timestamps), its text parsed once per process. Each
    call gets its own copy."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"profile {path} is not UTF-8 text") from None
    parsed = _TOML_CACHE.get(text)
    if parsed is None:
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ProfileError(f"profile {path} is not valid TOML: {exc}") from None
        _TOML_CACHE[text] = parsed
    return _fresh(parsed)  # type: ignore[no-any-return]


def available(extra_dirs: tuple[Path, ...] = ()) -> dict[str, Path]:
    """Profile name -> file, built-in first, then extra folders (which may override)."""
    found: dict[str, Path] = {}
    for folder in (builtin_dir(), *extra_dirs):
        if folder.is_dir():
            for p in sorted(folder.glob("*.toml")):
                found[p.stem] = p
    return found


def load(name_or_path: str, extra_dirs: tuple[Path, ...] = (), _seen: tuple[str, ...] = ()) -> Profile:
    """Load a profile by built-in name or file path, resolving `extends`."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" or path.exists()):
        known = available(extra_dirs)
        if name_or_path not in known:
            raise ProfileError(f"unknown profile {name_or_path!r} (known: {', '.join(sorted(known)) or 'none'})")
        path = known[name_or_path]
    if not path.is_file():
        raise ProfileError(f"profile file {path} does not exist")
    data = _read_toml(path)
    meta = data.pop("profile", {})
    if not isinstance(meta, Mapping):
        raise ProfileError(f"profile {path}: [profile] must be a table")
    name = str(meta.get("name", path.stem))
    if name in _seen:
        raise ProfileError(f"profile {path}: circular 'extends' through {' -> '.join(_seen + (name,))}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    parent = meta.get("extends")
    if parent is not None:
        if not isinstance(parent, str):
            raise ProfileError(f"profile {path}: extends must be a profile name")
        base = load(parent, (*extra_dirs, path.parent), _seen + (name,))
        values.update(base.values)
        sources.update(base.sources)
    _flatten(data, "", values, sources)
    match = meta.get("match", {})
    if not isinstance(match, Mapping):
        raise ProfileError(f"profile {path}: [profile.match] must be a table")
    return Profile(
        name=name,
        description=str(meta.get("description", "")),
        values=values,
        sources=sources,
        match=dict(match),
        path=str(path),
    )


def autodetect(gpu_model: str | None, gpu_count: int | None, extra_dirs: tuple[Path, ...] = ()) -> str:
    """Pick the built-in profile whose `match` fits the GPUs found; `generic` otherwise."""
    if gpu_model:
        for name, path in available(extra_dirs).items():
            try:
                meta = _read_toml(path).get("profile", {})
            except ProfileError:
                continue
            match = meta.get("match", {}) if isinstance(meta, Mapping) else {}
            sub = match.get("gpu_model_contains")
            cnt = match.get("gpu_count")
            if sub and sub.lower() in gpu_model.lower() and (cnt is None or cnt == gpu_count):
                return name
    return "generic"

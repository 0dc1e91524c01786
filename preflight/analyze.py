"""analyze: grade captured files with the same checks, classified by content, not name.

Each path is a file, a folder of files, or a folder of per-node folders. A folder whose
files are each of a different kind is one node (named after the folder); where a folder
holds several files of one kind, each file is graded as a node of its own. Content that no
format recognises is reported as such (SKIP, "not recognised"), never guessed.
"""

from __future__ import annotations

import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

from preflight import engine
from preflight import profile as profiles
from preflight.model import Capture, CaptureState, Result, Status
from preflight.profile import Profile
from preflight.registry import Format, Options, Registry

SNIFF_BYTES = 256 * 1024
MAX_FILE_BYTES = 64 * 1024 * 1024
UNKNOWN_CHECK = "analyze.unrecognised"


def classify(text: str, registry: Registry) -> list[Format]:
    """Every registered format whose detector recognises `text`, most specific first."""
    head = text[:SNIFF_BYTES]
    found = []
    for fmt in sorted(registry.formats.values(), key=lambda f: -f.priority):
        try:
            if fmt.detect(head):
                found.append(fmt)
        except Exception:
            continue
    # one file stands in for one capture per probe: keep the highest-priority format per probe
    by_probe: dict[str, Format] = {}
    for f in found:
        by_probe.setdefault(f.probe_name, f)
    return list(by_probe.values())


def read_text(path: Path) -> tuple[str, str]:
    """(text, problem). Binary or unreadable files give an empty text and the problem."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return "", f"cannot read: {exc.strerror or exc}"
    note = ""
    if len(data) > MAX_FILE_BYTES:
        data = data[:MAX_FILE_BYTES]
        note = f"only the first {MAX_FILE_BYTES // (1024 * 1024)} MiB read"
    if b"\x00" in data[:SNIFF_BYTES]:
        return "", "binary content"
    return data.decode("utf-8", errors="replace"), note


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def gather(paths: list[Path], parent: str | None = None, depth: int = 0) -> list[tuple[str, list[Path]]]:
    """Group files into nodes: [(node name, files)]. The folders given and their subfolders
    are nodes named after themselves; a folder inside a node's folder (a bundle's `n3/run/`)
    is named after both (`n3/run`)."""
    groups: list[tuple[str, list[Path]]] = []
    for path in paths:
        if path.is_file():
            groups.append((path.name, [path]))
            continue
        if not path.is_dir():
            groups.append((str(path), [path]))  # reported as unreadable
            continue
        name = f"{parent}/{path.name}" if parent else path.name
        loose = _files(path)
        if loose:
            groups.append((name, loose))
        for sub in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
            groups.extend(gather([sub], name if (loose and depth >= 1) else None, depth + 1))
    return groups


def is_archive(path: Path) -> bool:
    """A tar archive (a `preflight collect` bundle, or any .tar/.tar.gz of captures)."""
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except OSError:
        return False


def unpack(path: Path, into: Path) -> Path:
    """Extract a tar archive safely (no absolute paths, links out or devices) below `into`."""
    target = into / path.name.replace(".", "_")
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tar:
        members = [m for m in tar.getmembers() if (m.isfile() or m.isdir())
                   and not m.name.startswith("/") and ".." not in Path(m.name).parts]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, members=members, filter="data")
        else:  # pragma: no cover - Pythons without extraction filters
            tar.extractall(target, members=members)  # noqa: S202
    inside = [p for p in target.iterdir() if not p.name.startswith(".")]
    return inside[0] if len(inside) == 1 and inside[0].is_dir() else target  # one wrapper folder: look inside


def analyze(registry: Registry, paths: list[Path], profile_name: str = "auto",
            options: Options | None = None, extra_profile_dirs: tuple = ()) -> list[Result]:
    options = options or Options(mode="analyze")
    options.mode = "analyze"
    schema = registry.profile_schema()
    fixed: Profile | None = None
    if profile_name != "auto":
        fixed = profiles.load(profile_name, extra_profile_dirs)
        profiles.validate(fixed, schema)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="preflight-analyze-") as tmp:
        archives: dict[str, Path] = {}
        expanded: list[Path] = []
        for path in paths:
            if is_archive(path):
                try:
                    target = unpack(path, Path(tmp))
                except (OSError, EOFError, ValueError, tarfile.TarError) as exc:
                    results.append(Result(check=UNKNOWN_CHECK, node=path.name, status=Status.SKIP,
                                          summary=f"{path.name}: unreadable archive ({exc}); not graded",
                                          source=str(path)))
                    continue
                archives[str(target.parent if target.parent != Path(tmp) else target)] = path
                expanded.append(target)
            else:
                expanded.append(path)
        results.extend(_analyze(registry, expanded, fixed, options, schema, extra_profile_dirs))
        for r in results:  # name the archive, not the temporary folder it was read from
            for folder, archive in archives.items():
                r.source = r.source.replace(folder, f"{archive}!")
    return results


def _analyze(registry: Registry, paths: list[Path], fixed: Profile | None, options: Options,
             schema: dict, extra_profile_dirs: tuple) -> list[Result]:
    results: list[Result] = []
    for group, files in gather(paths):
        classified: list[tuple[Path, list[Format], str]] = []
        for f in files:
            text, problem = read_text(f)
            fmts = classify(text, registry) if text.strip() else []
            if not fmts:
                why = problem or ("empty file" if not text.strip() else "content not recognised by any check")
                results.append(Result(check=UNKNOWN_CHECK, node=group, status=Status.SKIP,
                                      summary=f"{f.name}: {why}; not graded", source=str(f),
                                      evidence=[line for line in text.splitlines()[:3]]))
                continue
            classified.append((f, fmts, text))
        probe_count: dict[str, int] = defaultdict(int)
        for _, fmts, _ in classified:
            for fmt in fmts:
                probe_count[fmt.probe_name] += 1
        one_node = all(n == 1 for n in probe_count.values())
        units: list[tuple[str, list[tuple[Path, list[Format], str]]]]
        if one_node:
            units = [(group, classified)]
        else:
            units = [(f"{group}/{f.name}", [(f, fm, t)]) for f, fm, t in classified]
        for node, items in units:
            captures: dict[str, Capture] = {}
            for f, fmts, text in items:
                for fmt in fmts:
                    captures[fmt.probe_name] = Capture(probe=fmt.probe_name, argv=[fmt.name], state=CaptureState.OK,
                                                       stdout=text, rc=0, source=str(f))
            prof = fixed or profiles.load(engine.detect_profile_name(captures, extra_profile_dirs),
                                          extra_profile_dirs)
            for check in sorted(registry.checks.values(), key=lambda c: c.id):
                used = [p for p in check.formats if p in captures]
                if not used:
                    continue
                mine = {p: captures[p] for p in used}
                results.extend(engine.grade_check(check, node, mine, prof, options))
    return results

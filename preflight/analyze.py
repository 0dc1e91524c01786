"""analyze: grade captured text with the same checks, classified by content, not by name.

Inputs are files, folders (per-node folders, or a `preflight collect` bundle), archives (tar,
tar.gz/.xz/.bz2, zip), single compressed files (.gz/.xz/.bz2) and `-` (standard input). Every
input is read safely: only regular files are opened (FIFOs, devices and sockets are reported,
never read); symbolic-link cycles are followed once; archives are read in memory (nothing is
written to disk) with a cap on total size, expansion ratio and member count; a file larger
than the cap is read from its end, the newest part of a log, and says so.

Each file's text is framed (`preflight.framing`): prompts cut it into commands, `pdsh`/`clush`
host prefixes and host headers split it per node, and every line's framing is peeled. Each
document is classified by the registered formats; what no format recognises is reported as
such (SKIP, `analyze.unrecognised`), never guessed. A node's documents are graded by
`grading.grade_node`, the function `run`, `triage` and the sweep use too.
"""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import lzma
import multiprocessing as mp
import os
import re
import stat
import sys
import tarfile
import zipfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from preflight import engine, lazyre
from preflight import profile as profiles
from preflight.findings import coded_result
from preflight.framing import Doc, _stages, frame
from preflight.grading import FactStore, grade_cluster, grade_node
from preflight.model import Result, Status
from preflight.parsers import nvsmi_settings
from preflight.parsers.base import Format
from preflight.profile import Profile
from preflight.registry import Check, Options, Registry

SNIFF_BYTES = 256 * 1024
MAX_FILE_BYTES = 256 * 1024 * 1024  # read window per file; a larger file is read from its end
ARCHIVE_MAX_BYTES = 512 * 1024 * 1024  # total uncompressed bytes read from one archive
ARCHIVE_MAX_FILES = 20000
MAX_RATIO = 200  # uncompressed : compressed; real logs compress 5-30x, a bomb 1000x
RATIO_FLOOR = 64 * 1024 * 1024  # the ratio check applies past this many bytes
MAX_DEPTH = 32  # folder depth followed
UNKNOWN_CHECK = "analyze.unrecognised"
UNREACHABLE_CHECK = "analyze.node"
# cross-node checks that need only facts, so a multi-node paste is compared across its nodes
CROSS_NODE_IN_ANALYZE = ("cluster.versions", "cluster.nccl_env")
# what pdsh, clush, ssh and srun print for a node they could not run the command on
_NODE_FAILED = lazyre.compile(
    r"ssh: connect to host \S+ port \d+: .*|ssh: Could not resolve hostname .*|Permission denied \(publickey.*|"
    r"Host key verification failed\.?|Connection (?:refused|timed out|closed by remote host)|No route to host|"
    r"ssh exited with exit code \d+|mcmd: connect .*|rcmd: .*(?:failed|refused).*|"
    r"srun: error: (?:\S+: )?task \d+: .*|clush: \S+: exited with exit code \d+|"
    r"Name or service not known|Could not resolve hostname .*", re.IGNORECASE)
_PDSH_SELF = lazyre.compile(r"^(?:pdsh|clush|pdcp)@\S+: (?P<host>[\w.\[\],-]+): (?P<msg>.*)$")
STDIN = "-"


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass
class Entry:
    """One file to read: a path on disk, an archive member or standard input."""

    display: str  # what results name as their source
    parts: tuple[str, ...]  # folder components for grouping into nodes, last = file name
    load: Callable[[], tuple[bytes, str]] | None = None  # (data, note); None when not readable
    problem: str = ""

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else self.display


class TooBig(Exception):
    """An archive or compressed file past the caps (a decompression bomb, or just too large)."""


def _bounded_read(fh: io.BufferedIOBase | io.RawIOBase | gzip.GzipFile | lzma.LZMAFile | bz2.BZ2File,
                  limit: int, what: str) -> tuple[bytes, str]:
    """Read a stream to its end, keeping the last MAX_FILE_BYTES; refuse past `limit` bytes."""
    chunks: list[bytes] = []
    kept = 0
    total = 0
    while True:
        chunk = fh.read(1 << 20)
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise TooBig(f"{what} expands past {limit // (1 << 20)} MiB; not read")
        chunks.append(chunk)
        kept += len(chunk)
        while kept - len(chunks[0]) >= MAX_FILE_BYTES:
            kept -= len(chunks.pop(0))
    data = b"".join(chunks)
    note = ""
    if len(data) > MAX_FILE_BYTES:
        data = _from_line(data[-MAX_FILE_BYTES:])
        note = f"only the newest {MAX_FILE_BYTES >> 20} MiB of {total >> 20} MiB read"
    return data, note


def _from_line(data: bytes) -> bytes:
    """A tail cut at a line start (the first partial line dropped)."""
    nl = data.find(b"\n")
    return data[nl + 1:] if 0 <= nl < 4096 else data


def _read_file(path: Path) -> tuple[bytes, str]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size <= MAX_FILE_BYTES:
            return fh.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES], ""
        fh.seek(size - MAX_FILE_BYTES)
        return _from_line(fh.read(MAX_FILE_BYTES)), (
            f"only the newest {MAX_FILE_BYTES >> 20} MiB of {size >> 20} MiB read")


_MAGIC = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"BZh": "bz2"}


def _compression(head: bytes) -> str:
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            return kind
    return ""


def _ratio_limit(compressed: int) -> int:
    return min(ARCHIVE_MAX_BYTES, max(RATIO_FLOOR, compressed * MAX_RATIO))


def _decompressed(path: Path, kind: str) -> tuple[bytes, str]:
    opener: Callable[..., io.BufferedIOBase] = {"gzip": gzip.open, "xz": lzma.open, "bz2": bz2.open}[kind]  # type: ignore[assignment]
    limit = _ratio_limit(path.stat().st_size)
    with opener(path, "rb") as fh:
        return _bounded_read(fh, limit, path.name)


def _archive_entries(path: Path, parts: tuple[str, ...], display: str) -> list[Entry]:
    """The members of a tar or zip archive as entries, read in memory under the caps."""
    limit = _ratio_limit(path.stat().st_size)
    base = parts[:-1] + (path.name,)
    members = _zip_members(path, limit) if zipfile.is_zipfile(path) else _tar_members(path, limit)
    out: list[Entry] = []
    for member, data, note in members:
        mparts = tuple(p for p in member.replace("\\", "/").split("/") if p not in ("", "."))
        if not mparts or ".." in mparts:
            continue  # no member names a place outside the archive
        out.append(Entry(display=f"{display}!{'/'.join(mparts)}", parts=base + mparts, load=_const(data, note)))
    return out


def _zip_members(path: Path, limit: int) -> Iterator[tuple[str, bytes, str]]:
    """(name, data, note) of each file in a zip archive; TooBig past the caps."""
    total = 0
    with zipfile.ZipFile(path) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > ARCHIVE_MAX_FILES:
            raise TooBig(f"{path.name} holds {len(infos)} files (more than {ARCHIVE_MAX_FILES}); not read")
        for info in infos:
            total += info.file_size
            if total > limit:
                raise TooBig(f"{path.name} expands past {limit >> 20} MiB; not read")
            with zf.open(info) as fh:
                data, note = _bounded_read(fh, limit, info.filename)  # type: ignore[arg-type]
            yield info.filename, data, note


def _tar_members(path: Path, limit: int) -> Iterator[tuple[str, bytes, str]]:
    """(name, data, note) of each regular file in a tar archive (any compression); TooBig past
    the caps. Links, devices and FIFOs in an archive are never materialised."""
    total = 0
    with tarfile.open(path, "r:*") as tar:
        count = 0
        for m in tar:
            count += 1
            if count > ARCHIVE_MAX_FILES:
                raise TooBig(f"{path.name} holds more than {ARCHIVE_MAX_FILES} members; not read")
            if not m.isfile():
                continue
            total += m.size
            if total > limit:
                raise TooBig(f"{path.name} expands past {limit >> 20} MiB; not read")
            member = tar.extractfile(m)
            if member is None:
                continue
            data = member.read(min(m.size, MAX_FILE_BYTES) + 1)
            note = ""
            if m.size > MAX_FILE_BYTES:
                data = data[:MAX_FILE_BYTES]
                note = f"only the first {MAX_FILE_BYTES >> 20} MiB of this archive member read"
            yield m.name, data, note


def _const(data: bytes, note: str) -> Callable[[], tuple[bytes, str]]:
    return lambda: (data, note)


def _is_archive(path: Path, head: bytes) -> bool:
    if head.startswith(b"PK\x03\x04"):
        return True
    try:
        return tarfile.is_tarfile(path)
    except (OSError, EOFError, tarfile.TarError, ValueError, lzma.LZMAError, zipfile.BadZipFile):
        return False


def _file_entries(path: Path, parts: tuple[str, ...], display: str) -> list[Entry]:
    try:
        with path.open("rb") as fh:
            head = fh.read(512)
    except OSError as exc:
        return [Entry(display, parts, problem=f"cannot read: {exc.strerror or exc}")]
    if _is_archive(path, head):
        try:
            members = _archive_entries(path, parts, display)
            return members or [Entry(display, parts, problem="empty archive (no files in it)")]
        except TooBig as exc:
            return [Entry(display, parts, problem=f"archive refused: {exc}")]
        except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, ValueError, lzma.LZMAError,
                zlib_error()) as exc:
            return [Entry(display, parts, problem=f"unreadable archive ({exc})")]
    kind = _compression(head)
    if kind:
        name = parts[-1]
        for ext in (".gz", ".xz", ".bz2", ".tgz"):
            if name.endswith(ext):
                name = name[: -len(ext)]
        return [Entry(display, parts[:-1] + (name or parts[-1],), load=lambda: _decompressed(path, kind))]
    return [Entry(display, parts, load=lambda: _read_file(path))]


def zlib_error() -> type[Exception]:
    import zlib

    return zlib.error


def _walk(path: Path, parts: tuple[str, ...], seen: set[tuple[int, int]], depth: int) -> Iterator[Entry]:
    """Entries under `path`, following links once: a directory already visited is skipped."""
    display = str(path)
    try:
        st = os.stat(path)  # follows symbolic links
    except OSError as exc:
        if os.path.islink(path):
            yield Entry(display, parts, problem="dangling symbolic link")
        else:
            yield Entry(display, parts, problem=f"cannot read: {exc.strerror or exc}")
        return
    if stat.S_ISDIR(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return  # a symbolic-link cycle, or the same folder twice
        if depth > MAX_DEPTH:
            yield Entry(display, parts, problem=f"folder nested deeper than {MAX_DEPTH} levels; not read")
            return
        seen.add(key)
        try:
            children = sorted(os.listdir(path))
        except OSError as exc:
            yield Entry(display, parts, problem=f"cannot list: {exc.strerror or exc}")
            return
        for child in children:
            if child.startswith("."):
                continue
            yield from _walk(path / child, parts + (child,), seen, depth + 1)
        return
    if not stat.S_ISREG(st.st_mode):
        what = ("a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        yield Entry(display, parts, problem=f"{what}; not read")
        return
    yield from _file_entries(path, parts, display)


def _reader(src: io.BufferedIOBase) -> Callable[[], tuple[bytes, str]]:
    return lambda: _bounded_read(src, 1 << 40, "stdin")


def entries(paths: list[Path], stdin: io.BufferedIOBase | None = None) -> list[Entry]:
    """Every input file, archive member and standard input, in order."""
    out: list[Entry] = []
    seen: set[tuple[int, int]] = set()
    for p in paths:
        if str(p) == STDIN:
            src: io.BufferedIOBase = stdin if stdin is not None else sys.stdin.buffer  # type: ignore[assignment]
            out.append(Entry("<stdin>", ("stdin",), load=_reader(src)))
            continue
        name = p.name or str(p)
        out.extend(_walk(p, (name,), seen, 0))
    return out


# ---------------------------------------------------------------------------------------------
# Text


_CONTROL = bytes([*range(9), *(b for b in range(14, 32) if b != 27)])  # control bytes text does not hold


def decode(data: bytes) -> tuple[str, str]:
    """(text, problem): binary content gives no text; invalid UTF-8 is replaced and said."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), ""
        except UnicodeDecodeError:
            pass
    head = data[:8192]
    if b"\x00" in head:
        return "", "binary content"
    if head:
        ctrl = len(head) - len(head.translate(None, _CONTROL))
        if ctrl > len(head) // 10:
            return "", "binary content"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        return text, "invalid UTF-8 replaced"


# ---------------------------------------------------------------------------------------------
# Classification


def classify(doc: Doc, registry: Registry) -> list[Format]:
    """Every registered format whose detector recognises the document, one per probe, most
    specific (highest priority) first."""
    found: list[Format] = []
    for fmt in _by_priority(registry):
        try:
            if fmt.recognises(doc):
                found.append(fmt)
        except Exception:  # a broken detector (site code) recognises nothing
            continue
    by_probe: dict[str, Format] = {}
    for f in found:
        by_probe.setdefault(f.probe_name, f)
    return list(by_probe.values())


# the words of a command line that can name the program it runs (`/usr/bin/ping` gives `ping`)
_COMMAND_WORD = lazyre.compile(r"[A-Za-z0-9_.+-]+")


def _produces(fmt: Format, words: set[str]) -> bool:
    """Whether the format is the output of a program the command names: its name, or the part
    of its name before a `-` (`nvidia-smi` for nvidia-smi-q, `ping` for ping)."""
    parts = fmt.name.split("-")
    return any("-".join(parts[:i]) in words for i in range(1, len(parts) + 1))


def producers_of(command: str, registry: Registry) -> list[Format]:
    """The formats of the programs a command line names (most specific first); [] when it
    names none that preflight reads."""
    words = set(_COMMAND_WORD.findall(command))
    return [f for f in _by_priority(registry) if _produces(f, words)]


def classify_cut(doc: Doc, registry: Registry) -> list[Format]:
    """The formats of a document no format recognises whole, read as cut short: the output of
    a command shown above it (a prompt, a pdsh/srun line) whose program is a known producer,
    stopped before its end (killed by a timeout, interrupted, the paste ending there). The
    document is then marked an excerpt, so its parser and check grade it as cut (a ping run
    that printed its header but no statistics: no result), instead of it being dropped and
    the command's other outputs passing alone. [] (and the document left as it was) otherwise."""
    if not doc.command or doc.excerpt or not doc.text.strip():
        return []
    producers = producers_of(doc.command, registry)
    if not producers:
        return []
    doc.excerpt = True
    found: dict[str, Format] = {}
    for fmt in producers:
        try:
            if fmt.recognises(doc):
                found.setdefault(fmt.probe_name, fmt)
        except Exception:  # a broken detector (site code) recognises nothing
            continue
    if not found:
        doc.excerpt = False
    return list(found.values())


def _by_priority(registry: Registry) -> list[Format]:
    """The registry's formats, most specific first (sorted once per registry)."""
    key = tuple(map(id, registry.formats.values()))
    cached = getattr(registry, "_formats_by_priority", None)
    if cached is None or cached[0] != key:
        cached = (key, sorted(registry.formats.values(), key=lambda f: -f.priority))
        registry._formats_by_priority = cached  # type: ignore[attr-defined]
    return cached[1]


@dataclass
class Unit:
    """What is graded as one node: its documents per probe, and where they came from."""

    node: str
    docs: dict[str, list[Doc]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def add(self, probe: str, doc: Doc) -> None:
        self.docs.setdefault(probe, []).append(doc)


@dataclass
class Classified:
    entry: Entry
    docs: list[tuple[Doc, list[Format]]]
    note: str = ""


def _groups(items: list[Entry]) -> list[tuple[str, list[Entry]]]:
    """Group entries into nodes: the folders given and their subfolders are nodes named after
    themselves; a folder inside a node's folder (a bundle's `n3/run/`) is named after both."""
    tree: dict[tuple[str, ...], list[Entry]] = {}
    for e in items:
        tree.setdefault(e.parts[:-1], []).append(e)
    out: list[tuple[str, list[Entry]]] = []
    roots = sorted({e.parts[:1] for e in items if len(e.parts) > 1})
    singles = [e for e in items if len(e.parts) == 1]
    for e in singles:
        out.append((e.name, [e]))

    def visit(folder: tuple[str, ...], parent: str | None, depth: int) -> None:
        name = f"{parent}/{folder[-1]}" if parent else folder[-1]
        loose = tree.get(folder, [])
        if loose:
            out.append((name, loose))
        subs = sorted({p[: len(folder) + 1] for p in tree if len(p) > len(folder) and p[: len(folder)] == folder})
        for sub in subs:
            visit(sub, name if (loose and depth >= 1) else None, depth + 1)

    for root in roots:
        visit(root, None, 0)
    return out


def _task_split(doc: Doc) -> dict[str, Doc] | None:
    """An `srun -l` document of node-local output with several tasks, split per task (named
    after the host its lines name, when they do)."""
    if "srun" not in doc.stack.outer:
        return None
    by: dict[int, list] = {}
    for ln in doc.lines:
        if ln.rank is not None:
            by.setdefault(ln.rank, []).append(ln)
    if len(by) < 2:
        return None
    out: dict[str, list] = {}
    for rank, lines in sorted(by.items()):
        hosts = [ln.host for ln in lines if ln.host]
        name = max(set(hosts), key=hosts.count) if hosts else f"task{rank}"
        out.setdefault(name, []).extend(lines)
    return {name: doc.sub(lines) for name, lines in out.items()}


def _units(registry: Registry, group: str, items: list[Classified]) -> list[Unit]:
    node_local = {p for c in registry.checks.values() if c.node_local for p in c.reads()}
    # how many files of this group feed each probe: several files of one kind are several nodes
    per_probe: dict[str, set[str]] = {}
    for c in items:
        for doc, fmts in c.docs:
            if doc.host:
                continue
            for f in fmts:
                per_probe.setdefault(f.probe_name, set()).add(c.entry.display)
    one_node = all(len(v) == 1 for v in per_probe.values())
    units: dict[str, Unit] = {}
    for c in items:
        base = group if one_node else f"{group}/{c.entry.name}"
        for doc, fmts in c.docs:
            for f in fmts:
                split = _task_split(doc) if f.probe_name in node_local else None
                parts = split.items() if split else [(doc.host, doc)]
                for host, d in parts:
                    node = host or base
                    u = units.setdefault(node, Unit(node=node))
                    u.add(f.probe_name, d)
                    if c.entry.display not in u.sources:
                        u.sources.append(c.entry.display)
    return list(units.values())


def _unreachable(docs: list[tuple[Doc, list[Format]]]) -> dict[str, str]:
    """Nodes of a multi-host paste that the launcher could not run the command on: {host: why}."""
    out: dict[str, str] = {}
    recognised_hosts = {d.host for d, f in docs if f and d.host}
    for d, fmts in docs:
        for ln in d.head(200):
            m = _PDSH_SELF.match(ln.text.strip())
            if m and _NODE_FAILED.search(m.group("msg")):
                out.setdefault(m.group("host"), m.group("msg").strip())
                continue
            if d.host and not fmts and d.host not in recognised_hosts:
                fm = _NODE_FAILED.search(ln.text)
                if fm:
                    out.setdefault(d.host, ln.text.strip())
    return {h: w for h, w in out.items() if h not in recognised_hosts}


def _unrecognised(node: str, display: str, why: str, evidence: list[str], readable: bool = True) -> Result:
    code = "analyze.unrecognised/not-recognised" if readable else "analyze.unrecognised/unreadable"
    return coded_result(code, UNKNOWN_CHECK, node, f"{Path(display).name}: {why}; not graded", evidence[:3], source=display)


def analyze(registry: Registry, paths: list[Path], profile_name: str = "auto",
            options: Options | None = None, extra_profile_dirs: tuple = (),
            stdin: io.BufferedIOBase | None = None, jobs: int | None = 1) -> list[Result]:
    """Every input graded: each group of files (a node's folder, a multi-host paste) read,
    classified and graded in turn, by `jobs` processes (None: the usable CPUs; 1: this process),
    the results in the same order whatever the number."""
    options = options or Options(mode="analyze")
    options.mode = "analyze"
    schema = registry.profile_schema()
    fixed: Profile | None = None
    if profile_name != "auto":
        fixed = profiles.load(profile_name, extra_profile_dirs)
        profiles.validate(fixed, schema)
    checks = sorted(registry.checks.values(), key=lambda c: c.id)
    groups = _groups(entries(paths, stdin))
    work = _Work(registry, checks, fixed, options, extra_profile_dirs, groups)
    results: list[Result] = []
    for graded in _each_group(work, _jobs_for(jobs, groups)):
        results.extend(graded)  # a group's captures are gone once graded: only its findings are kept
    return results


@dataclass
class _Work:
    """What every group is graded with (inherited by the pool's forked workers, never pickled)."""

    registry: Registry
    checks: list[Check]
    fixed: Profile | None
    options: Options
    extra_profile_dirs: tuple
    groups: list[tuple[str, list[Entry]]]

    def grade(self, i: int) -> list[Result]:
        """Group i read, classified and graded: its results, in order."""
        group, group_entries = self.groups[i]
        results: list[Result] = []
        classified: list[Classified] = []
        for e in group_entries:
            c = _classify_entry(self.registry, group, e, results)
            if c is not None:
                classified.append(c)
        results.extend(_grade_group(self.registry, group, classified, self.checks, self.fixed, self.options,
                                    self.extra_profile_dirs))
        return results


_WORK: _Work | None = None  # the forked pool workers' copy of the parent's work
POOL_MIN_GROUPS = 4  # fewer groups than this are graded in this process (a pool costs more than it saves)
POOL_CHUNK = 8  # groups per task sent to a worker


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, e.g. a cgroup or taskset limit), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _jobs_for(jobs: int | None, groups: list[tuple[str, list[Entry]]]) -> int:
    """Worker processes for these groups: `jobs` (None: the usable CPUs), 1 where a pool would not
    pay (few groups) or cannot serve (standard input is read by this process only)."""
    n = usable_cpus() if jobs is None else max(1, jobs)
    if len(groups) < POOL_MIN_GROUPS or any(e.display == "<stdin>" for _, es in groups for e in es):
        return 1
    return min(n, len(groups))


def _grade_chunk(lo: int, hi: int) -> list[list[Result]]:
    assert _WORK is not None  # pragma: no mutate (set before the pool forks)
    return [_WORK.grade(i) for i in range(lo, hi)]


def _each_group(work: _Work, jobs: int) -> Iterator[list[Result]]:
    """Each group's results in the groups' order: graded here (jobs 1) or by `jobs` forked worker
    processes, a bounded number of chunks in flight so that finished results, not pending
    captures, are what is held."""
    if jobs <= 1 or "fork" not in mp.get_all_start_methods():
        for i in range(len(work.groups)):
            yield work.grade(i)
        return
    global _WORK
    _WORK = work
    bounds = [(lo, min(lo + POOL_CHUNK, len(work.groups))) for lo in range(0, len(work.groups), POOL_CHUNK)]
    done = 0  # groups whose results were given; a broken pool leaves the rest to this process
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork")) as pool:
            pending: deque[Future[list[list[Result]]]] = deque()
            todo = iter(bounds)
            for lo, hi in itertools.islice(todo, 2 * jobs):
                pending.append(pool.submit(_grade_chunk, lo, hi))
            while pending:
                for graded in pending.popleft().result():
                    done += 1
                    yield graded
                for lo, hi in itertools.islice(todo, 1):
                    pending.append(pool.submit(_grade_chunk, lo, hi))
    except BrokenProcessPool:  # a worker died (killed, out of memory)
        yield from (work.grade(i) for i in range(done, len(work.groups)))
    finally:
        _WORK = None


def _load_entry(group: str, e: Entry, results: list[Result]) -> tuple[str, str, str] | None:
    """(text, note, decoding problem) of an entry, or None with the reason it was not read in results."""
    if e.problem or e.load is None:
        results.append(_unrecognised(group, e.display, e.problem or "not readable", [], readable=False))
        return None
    try:
        data, note = e.load()
    except TooBig as exc:
        results.append(_unrecognised(group, e.display, str(exc), [], readable=False))
        return None
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib_error()) as exc:
        results.append(_unrecognised(group, e.display, f"cannot read: {exc}", [], readable=False))
        return None
    text, problem = decode(data)
    if problem == "binary content" or not text or text.isspace():
        results.append(_unrecognised(group, e.display, problem or "empty file", [], readable=False))
        return None
    return text, note, problem


def _classify_entry(registry: Registry, group: str, e: Entry, results: list[Result]) -> Classified | None:
    """An input's documents with the formats that recognise them; what cannot be graded (not
    readable, not recognised, a node that was not reached) goes to results instead."""
    loaded = _load_entry(group, e, results)
    if loaded is None:
        return None
    text, note, problem = loaded
    framed = frame(text, origin=e.display)
    docs = [(d, classify(d, registry) or classify_cut(d, registry)) for d in framed.docs]
    recognised = [(d, f) for d, f in docs if f]
    for host, why in _unreachable(docs).items():
        results.append(coded_result("analyze.node/not-reached", UNREACHABLE_CHECK, host, f"node not checked: {why}",
                                    [why], f"make {host} reachable (ssh, name, host key) and collect again, or drain it",
                                    source=e.display))
    if not recognised and not _unreachable(docs):
        first = [ln.text for d in framed.docs for ln in d.head(3)][:3]
        results.append(_unrecognised(group, e.display, "content not recognised by any check", first))
        return None
    results.extend(_unread_outputs(registry, group, e.display, docs))
    return Classified(e, recognised, "; ".join(x for x in (note, problem) if x))


# programs that filter or list what another prints: the word after them (`grep nvidia`, `lsmod`)
# names no program that ran
_FILTERS = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "awk", "sed", "head", "tail", "less", "more", "sort",
                      "uniq", "wc", "cut", "tr", "tee", "column", "lsmod", "echo", "printf", "cat", "ls", "which"})


def _runs(command: str) -> str:
    """A command line less its stages that only filter or list (`lsmod | grep nvidia` -> '')."""
    keep = [st for st in _stages(command) if (st.split() or [""])[0].rsplit("/", 1)[-1] not in _FILTERS]
    return " | ".join(keep)


def _acknowledges(d: Doc) -> bool:
    """nvidia-smi's acknowledgement of a setting it changed (`Disabled persistence mode for GPU
    ...`): read, with no state of the GPU in it to grade."""
    return "nvidia-smi" in _runs(d.command or "") and nvsmi_settings.acknowledged(d.text.splitlines())


def _unread_outputs(registry: Registry, group: str, display: str, docs: list[tuple[Doc, list[Format]]]) -> list[Result]:
    """What an input shows that was not read though preflight knows its program: a document
    under the command line of a known producer (`ethtool -S eth0`, `nvidia-smi -q`) that no
    format recognises, even read as cut short. One result per command and node, naming the
    command and quoting the output's first lines, so that it is said, never silently dropped."""
    shown: dict[tuple[str, str], list[Doc]] = {}
    for d, fmts in docs:
        if not fmts and d.command and d.text.strip() and producers_of(_runs(d.command), registry) \
                and not _acknowledges(d):
            shown.setdefault((d.host or group, d.command), []).append(d)
    out: list[Result] = []
    for (node, command), ds in shown.items():
        quoted = [ln.text for ln in ds[0].head(3) if ln.text.strip()]  # pragma: no mutate (a display limit)
        where = f"line {ds[0].first_line}" + (f" (+{len(ds) - 1} more)" if len(ds) > 1 else "")
        out.append(coded_result("analyze.unrecognised/not-recognised", UNKNOWN_CHECK, node,
                                f"{Path(display).name}: output of `{command}` not read (no format of that program "
                                "recognises it, even cut short); not graded",
                                [f"$ {command} (output from {where})", *quoted],
                                f"paste the whole output of `{command}` (it was cut, or is not a form preflight reads)",
                                source=display))
    return out


def _grade_group(registry: Registry, group: str, classified: list[Classified], checks: list[Check],
                 fixed: Profile | None, options: Options, extra_profile_dirs: tuple) -> list[Result]:
    """Grade each node of a group with its profile (detected unless one was given), an input's
    reading notes added to the evidence; then compare the nodes."""
    notes = {c.entry.display: c.note for c in classified if c.note}
    stores: dict[str, FactStore] = {}
    used: dict[str, Profile] = {}
    graded: list[Result] = []
    for unit in _units(registry, group, classified):
        store = stores[unit.node] = FactStore(registry, docs=unit.docs)
        prof = used[unit.node] = fixed or profiles.load(engine.detect_profile_name(store, extra_profile_dirs),
                                                        extra_profile_dirs)
        for r in grade_node(checks, unit.node, store, prof, options):
            extra = [notes[s] for s in unit.sources if s in notes]
            if extra:
                r.evidence.extend(f"(input: {n})" for n in extra)
            graded.append(r)
    return _compare_nodes(registry, stores, graded, used, options)


def _compare_nodes(registry: Registry, stores: dict[str, FactStore], graded: list[Result],
                   used: dict[str, Profile], options: Options) -> list[Result]:
    """A paste from several nodes (pdsh, srun -l, a bundle) is also compared across them: the
    cross-node checks that need only facts (versions, NCCL environment). A comparison is shown
    only where at least two nodes reported what it compares."""
    if len(stores) < 2:
        return graded
    compare = [cc for cc in registry.cluster_checks.values() if cc.id in CROSS_NODE_IN_ANALYZE]
    out = grade_cluster(compare, list(stores), stores, graded, used, options, peers={}, addresses={})
    compared = {r.check: sum(1 for x in out if x.check == r.check and x.status is not Status.SKIP)
                for r in out if r.check in CROSS_NODE_IN_ANALYZE}
    return [r for r in out if r.check not in CROSS_NODE_IN_ANALYZE
            or (r.status is not Status.SKIP and compared.get(r.check, 0) >= 2)]


__all__ = ["ARCHIVE_MAX_BYTES", "ARCHIVE_MAX_FILES", "MAX_FILE_BYTES", "STDIN", "UNKNOWN_CHECK", "analyze",
           "classify", "classify_cut", "decode", "entries", "producers_of"]

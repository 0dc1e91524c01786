"""Every WARN format of the newest NCCL release (extracted from its source by
benchmarks/extract_nccl_warns.py into tests/fixtures/nccl/warn-formats.txt), filled with plausible
values, in NCCL's line layouts (2.5+ `host:pid:tid [dev] NCCL WARN msg`, 2.30.7's `file:line (func)
NCCL WARN msg`, 2.0's `file:line WARN msg` without the word NCCL) and three framings (raw,
torchrun's `[default0]:`, pasted after a prompt). Each line is read: by a rule (a kind of its own)
or kept as an unread error; nccl.transport is never PASS and nothing is "not recognised"."""

from __future__ import annotations

import importlib.util
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from preflight import registry
from preflight.analyze import analyze
from preflight.framing import Doc
from preflight.model import Result, Status
from preflight.parsers import nccl_log

ROOT = Path(__file__).resolve().parents[2]
FORMATS_FILE = ROOT / "tests" / "fixtures" / "nccl" / "warn-formats.txt"
HEADER = re.compile(r"^# (?P<calls>\d+) calls, (?P<literal>\d+) with a literal format, (?P<distinct>\d+) distinct formats$")


def _rows() -> list[tuple[str, str]]:
    rows = []
    for ln in FORMATS_FILE.read_text(encoding="utf-8").splitlines():
        if ln.startswith("#") or not ln.strip():
            continue
        where, fmt = ln.split("\t", 1)
        rows.append((where, fmt))
    return rows


ROWS = _rows()
# one row per distinct format (the first place that prints it)
FORMATS = list({fmt: (where, fmt) for where, fmt in reversed(ROWS)}.values())[::-1]

_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|j|z|t)?"
                   r"(?P<conv>[diouxXeEfgGcspm%])")
# plausible values: a rank, a size, a pointer, a device name, an errno text for %m (glibc)
_FILL = {"d": "3", "i": "3", "u": "7", "o": "17", "x": "1f", "X": "1F", "e": "1.5e+00", "E": "1.5E+00", "f": "1.5",
         "g": "1.5", "G": "1.5", "c": "x", "s": "mlx5_0", "p": "0x7f3a2c000b80", "m": "No such device", "%": "%"}
_ESC = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "", "0": ""}


def fill(fmt: str) -> list[str]:
    """A C format -> the lines NCCL prints with plausible values (a `\\n` in it starts a line)."""
    text = re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), m.group(1)), fmt)
    text = _SPEC.sub(lambda m: _FILL[m.group("conv")], text)
    return [ln for ln in text.split("\n") if ln.strip()] or [text]


# a generator script's WARN is printed from the C++ file it writes (src/device/symmetric/generate.py)
GENERATED = {"src/device/symmetric/generate.py": "device/symmetric/sym_kernels_host.cc"}


def _source(where: str) -> str:
    """`src/misc/socket.cc:483` -> `misc/socket.cc:483` (NCCL's __FILE__ is relative to src/)."""
    path, _, line = where.rpartition(":")
    return f"{GENERATED.get(path, path.removeprefix('src/'))}:{line}"


# NCCL's line layouts: (where, the message's lines) -> the lines as printed
LAYOUTS: dict[str, Callable[[str, list[str]], list[str]]] = {
    "2.5+": lambda where, msg: [f"gpu017:12345:12399 [3] NCCL WARN {msg[0]}", *msg[1:]],
    "2.30.7": lambda where, msg: [f"gpu017:12345:12399 [3] {_source(where)} (ncclFunc) NCCL WARN {msg[0]}", *msg[1:]],
    "2.0": lambda where, msg: [f"gpu017:12345:12399 [3] {_source(where)} WARN {msg[0]}", *msg[1:]],
}
FRAMINGS: dict[str, Callable[[list[str]], list[str]]] = {
    "raw": lambda lines: lines,
    "torchrun": lambda lines: [f"[default0]:{ln}" for ln in lines],
    "prompt": lambda lines: ["[user@gpu017 ~]$ torchrun --nproc-per-node 8 train.py", *lines, "[user@gpu017 ~]$ "],
}


def _text(layout: str, framing: str, where: str, fmt: str) -> tuple[str, str]:
    """The capture and its WARN line (as NCCL printed it, before framing)."""
    printed = LAYOUTS[layout](where, fill(fmt))
    return "\n".join(FRAMINGS[framing](printed)) + "\n", printed[0].strip()


def _grade(text: str) -> list[Result]:
    return analyze(registry.load(), [Path("-")], profile_name="auto", stdin=io.BytesIO(text.encode()))


def test_the_extraction_is_whole() -> None:
    # v2.30.7-1: 695 WARN calls under src/, 609 distinct formats
    m = next(filter(None, map(HEADER.match, FORMATS_FILE.read_text(encoding="utf-8").splitlines()[:5])))
    assert int(m.group("calls")) == len(ROWS) >= 690 and int(m.group("distinct")) == len(FORMATS) >= 600
    assert "v2.30.7-1" in FORMATS_FILE.read_text(encoding="utf-8").splitlines()[0]
    fmts = {fmt for _, fmt in ROWS}
    for known in ("NET/IB: Got CQE with error (devIndex=%d, req=%p, comm=%p (%s), wr_id=%lu, qp_num=%d)",
                  "failed to peer with device %d: %d %s",
                  "Call to %s failed: %s",  # checks.h SYSCHECK: a macro parameter between literals
                  "nvmlInit%s() failed: %s",  # nvmlwrap.cc: a stringified macro parameter
                  "ncclSymkGetKernelIndex: unknown kernel id %d"):  # src/device/symmetric/generate.py
        assert known in fmts, known
    assert any(f.startswith("P2P is disabled between NVLINK connected GPUs %d and %d. This should not be the case "
                            "given their connectivity") for f in fmts)  # three literals over three lines
    assert not [f for f in fmts if f.startswith("<non-literal")]


def _extractor():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("extract_nccl_warns", ROOT / "benchmarks" / "extract_nccl_warns.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


SOURCE = r'''#include "debug.h"
#define WARN(...) ncclDebugLogInternal(NCCL_LOG_WARN, __VA_ARGS__)
#define SYSCHECK(statement, name) do { \
  if (ret == -1) { \
    WARN("Call to " name " failed : %s", strerror(errno)); \
  } \
} while (0)
#define NVMLCHECK(name, ...) if (e) WARN(#name "() failed: %s", err(e))
// WARN("commented out %d", 1);
/* WARN("also commented out"); */
static void f(int a, uint64_t b) {
  WARN("one line %d", a);
  WARN("split over "
       "two lines: %" PRIu64 " bytes (%s)",
       b, ")");
  NOWARN(x, 1);
  WARN(msg);
  const char* s = "WARN(\"inside a string\")";
}
'''


def test_extractor_reads_calls_macros_and_literals() -> None:
    mod = _extractor()
    got = [(w.line, w.fmt) for w in mod.warns_in("src/x.cc", SOURCE)]
    assert got == [(5, "Call to %s failed : %s"), (8, "%s() failed: %s"), (12, "one line %d"),
                   (13, "split over two lines: %lu bytes (%s)"), (17, "<non-literal: msg>")]
    gen = "emitln(f, 'default: WARN(\"unknown kernel id %d\", (int)id); return -1;')\n"
    assert [(w.line, w.fmt) for w in mod.generated_warns_in("gen.py", gen)] == [(1, "unknown kernel id %d")]


def test_fill_handles_widths_flags_and_escapes() -> None:
    assert fill(r"a=%08x b=%-4d c=%llx d=%p e=%c %% f=%.*s g=%5.2f h=%zu i=%ld j=%m\n") == [
        "a=1f b=3 c=1f d=0x7f3a2c000b80 e=x % f=mlx5_0 g=1.5 h=7 i=3 j=No such device"]
    assert fill(r"one\ntwo") == ["one", "two"]


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_format_is_read_by_the_parser(layout: str, framing: str) -> None:
    """Each format alone in a log: its WARN line is an NCCL WARN of one process, of a kind a rule
    reads or kept as "other" (graded unread-error)."""
    missed = []
    for where, fmt in FORMATS:
        text, line = _text(layout, framing, where, fmt)
        log = nccl_log.parse(Doc(text))
        if [e.line for e in log.errors] != [line] or len(log.procs) != 1 or not nccl_log.detect(Doc(text)):
            missed.append(f"{where}: {line} -> {[(e.kind, e.line) for e in log.errors]}")
    assert not missed, f"{len(missed)} of {len(FORMATS)} not read, e.g. {missed[:5]}"


# analyze over each format alone, in each layout and each framing once (the parser test above takes every pair)
GRADED = [("2.5+", "raw"), ("2.30.7", "torchrun"), ("2.0", "prompt")]


@pytest.mark.parametrize(("layout", "framing"), GRADED)
def test_no_format_grades_pass(layout: str, framing: str) -> None:
    """nccl.transport over each format alone: never PASS, never "not recognised"; a format no rule
    reads is unread-error with its line as evidence."""
    bad = []
    unread = 0
    for where, fmt in FORMATS:
        text, line = _text(layout, framing, where, fmt)
        results = _grade(text)
        mine = [r for r in results if r.check == "nccl.transport"]
        if any("not recognised" in r.summary for r in results) or len(mine) != 1 or mine[0].status is Status.PASS:
            bad.append(f"{where}: {line} -> {[(r.check, r.status.value, r.summary[:80]) for r in results]}")
            continue
        if "nccl.transport/unread-error" in mine[0].facts.get("codes", []):
            unread += 1
            if line not in mine[0].evidence:
                bad.append(f"{where}: unread-error without its line: {mine[0].evidence}")
    assert not bad, f"{len(bad)} of {len(FORMATS)} wrong, e.g. {bad[:5]}"
    # most of NCCL's WARNs are read by no rule of their own; the known kinds are the rest
    assert len(FORMATS) // 2 < unread < len(FORMATS)

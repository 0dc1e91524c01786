"""Extract, from the NVIDIA open kernel modules' source, every error-level message format that a
release build of the driver prints to the kernel log, one format a line.

Usage:
    python benchmarks/extract_driver_errors.py --git-dir DIR --tag TAG [--tag OLDER_TAG] \
        [-o tests/fixtures/nvidia-driver/error-formats.txt]

DIR is a clone (bare or not) of github.com/NVIDIA/open-gpu-kernel-modules. With several tags
the output is the union (each format once, with the newest tag it was seen in).

What reaches the kernel log in a release build (the macros as the source defines them):
- RM `NV_PRINTF(level, fmt, ...)` (src/nvidia/inc/libraries/utils/nvprintf.h): the module is
  built with NV_PRINTF_STRINGS_ALLOWED=1 (src/nvidia/Makefile) and `nvDbg_PrintMsg`
  (src/nvidia/src/kernel/diagnostics/nvlog_printf.c) prints a level at or above LEVEL_ERROR
  when neither DEBUG nor DEVELOP is set. `RmMsgPrefix` writes the default prefix
  `NVRM: [GPU<n> ]<function>: ` (NVRM_MSG_PREFIX_NVRM | _GPU_INSTANCE | _FUNCTION).
  Levels read: LEVEL_ERROR, LEVEL_HW_ERROR, LEVEL_FATAL; `NV_PRINTF_COND` when either branch
  is one of those; `NV_PRINTF_EX(module, level, fmt)` prints `fmt` as it is (no prefix).
- RM `NV_ERROR_LOG(pGpu, num, fmt)`: an Xid line, `NVRM: Xid (PCI:dddd:bb:dd): num, pid=..,
  name=.., fmt` (nvErrorLog_va); `NV_ERROR_LOG_DATA(pGpu, num, fmt)`: `NVRM: fmt`.
- kernel interface `nv_printf(NV_DBG_ERRORS, fmt)` (kernel-open/nvidia/os-interface.c prints a
  level at or above NV_DBG_WARNINGS by default; NV_DBG_ERRORS is the error level) and
  `NV_DEV_PRINTF(NV_DBG_ERRORS, nv, fmt)` / `NV_DEV_PRINTF_STATUS` (prefix `NVRM: GPU
  %04x:%02x:%02x.%x: `).
- nvidia-uvm `UVM_ERR_PRINT_ALWAYS` (`nvidia-uvm: <file>:<line> <function>[pid:<n>] fmt`);
  `UVM_ERR_PRINT` only prints with the uvm_debug_prints module parameter, so it is left out.
Left out because a release build compiles them away: nvswitch `NVSWITCH_PRINT` and nvlink core
`NVLINK_PRINT` (both `((void)0)` unless DEVELOP / DEBUG / NV_MODS).

Output lines: `<tag>\t<file>:<line>\t<macro>\t<level>\t<format>` where <format> is the message
as it appears in the log (prefix included, `{func}` standing for the RM function name is filled
in, string literals joined, format macros such as NvU64_fmtx expanded, escapes kept as `\\n`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

ERROR_LEVELS = frozenset({"LEVEL_ERROR", "LEVEL_HW_ERROR", "LEVEL_FATAL"})
RM_DIRS = ("src/nvidia/",)
KERNEL_DIRS = ("kernel-open/nvidia/", "kernel-open/common/", "src/nvidia/arch/nvalloc/unix/")
UVM_DIRS = ("kernel-open/nvidia-uvm/",)
MACROS = ("NV_PRINTF", "NV_PRINTF_COND", "NV_PRINTF_EX", "NV_ERROR_LOG", "NV_ERROR_LOG_DATA", "nv_printf",
          "NV_DEV_PRINTF", "NV_DEV_PRINTF_STATUS", "UVM_ERR_PRINT_ALWAYS", "UVM_ERR_PRINT_ALWAYS_RL")
_CALL = re.compile(r"\b(" + "|".join(sorted(MACROS, key=len, reverse=True)) + r")\s*\(")
# format macros between string literals (nvtypes.h, nv.h, nvmisc.h)
FORMAT_MACROS = {
    "NvU64_fmtx": "llx", "NvU64_fmtX": "llX", "NvU64_fmtu": "llu", "NvU64_fmto": "llo", "NvS64_fmtd": "lld",
    "NvS64_fmti": "lli", "NvP64_fmt": "%p", "NV_PCI_DEV_FMT": "%04x:%02x:%02x.%x", "NvUPtr_fmtx": "lx",
    "NvUPtr_fmtX": "lX", "NvUPtr_fmtu": "lu", "NV_FILE_FMT": "%s", "PRIx64": "llx", "PRIX64": "llX",
    "PRIu64": "llu", "PRId64": "lld", "NV_UUID_FMT": "%s", "NvU64_FMT": "llx",
    "NVIDIA_UVM_PRETTY_PRINTING_PREFIX": "nvidia-uvm: ", "KERN_ERR": "",
}
XID_PREFIX = "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, "
DEV_PREFIX = "NVRM: GPU %04x:%02x:%02x.%x: "
UVM_PREFIX = "nvidia-uvm: %s:%u %s[pid:%d] "


@dataclass
class Found:
    path: str
    line: int
    macro: str
    level: str
    fmt: str


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def _skip_string(src: str, i: int) -> int:
    """Index after the string or char literal starting at src[i]."""
    q = src[i]
    i += 1
    while i < len(src) and src[i] != q:
        i += 2 if src[i] == "\\" else 1
    return i + 1


def call_args(src: str, start: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose '(' is at src[start], and the index after ')'."""
    depth, i, args, cur = 0, start, [], start + 1
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = _skip_string(src, i)
            continue
        if src.startswith("//", i):
            i = src.find("\n", i)
            if i < 0:
                return None
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i)
            if j < 0:
                return None
            i = j + 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(src[cur:i])
                return [a.strip() for a in args], i + 1
        elif c == "," and depth == 1:
            args.append(src[cur:i])
            cur = i + 1
        i += 1
    return None


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[A-Za-z_]\w*|/\*.*?\*/|//[^\n]*|\s+|.', re.S)


def join_literals(arg: str) -> str | None:
    """A format argument made of string literals and format macros -> its text; None when it is
    not a literal (a variable, a function call)."""
    out: list[str] = []
    seen_literal = False
    for tok in _TOKEN.findall(arg):
        if tok.startswith('"'):
            out.append(tok[1:-1])
            seen_literal = True
        elif tok.isspace() or tok.startswith(("/*", "//")):
            continue
        elif tok in FORMAT_MACROS:
            out.append(FORMAT_MACROS[tok])
        elif re.fullmatch(r"[A-Za-z_]\w*", tok) and tok.isupper() or tok.endswith("_fmt"):
            out.append("%s")  # a format macro not listed: some text
        else:
            return None
    return "".join(out) if seen_literal else None


_FUNC_HEAD = re.compile(r"([A-Za-z_]\w*)\s*\(")
_NOT_FUNC = frozenset({"if", "for", "while", "switch", "return", "sizeof", "defined", "NV_API_CALL"})


def enclosing_function(src: str, pos: int) -> str:
    """The C function whose body holds src[pos]: the first identifier followed by '(' in the
    declaration before the last column-0 '{' (RM and kernel style)."""
    brace = src.rfind("\n{", 0, pos)
    if brace < 0:
        return ""
    prev = max(src.rfind("\n}", 0, brace), src.rfind(";", 0, brace), src.rfind("\n#", 0, brace))
    head = src[prev + 1:brace]
    head = re.sub(r"/\*.*?\*/|//[^\n]*", " ", head, flags=re.S)
    for m in _FUNC_HEAD.finditer(head):
        if m.group(1) not in _NOT_FUNC and not m.group(1).isupper():
            return m.group(1)
    return ""


def _rm_level(args: list[str], macro: str) -> str | None:
    if macro == "NV_PRINTF_COND":
        levels = {args[1], args[2]} & ERROR_LEVELS
        return sorted(levels)[0] if levels else None
    level = args[1] if macro == "NV_PRINTF_EX" else args[0]
    return level if level in ERROR_LEVELS else None


def scan_file(path: str, src: str) -> Iterator[Found]:
    rm = path.startswith(RM_DIRS) and not path.startswith(KERNEL_DIRS)
    kernel = path.startswith(KERNEL_DIRS)
    uvm = path.startswith(UVM_DIRS)
    for m in _CALL.finditer(src):
        line_start = src.rfind("\n", 0, m.start()) + 1
        if src[line_start:m.start()].lstrip().startswith(("#", "*", "//")):
            continue  # a definition or a comment
        macro = m.group(1)
        parsed = call_args(src, m.end() - 1)
        if parsed is None or not parsed[0]:
            continue
        args = parsed[0]
        lineno = src.count("\n", 0, m.start()) + 1
        found = _one(path, src, m.start(), macro, args, rm, kernel, uvm)
        if found is not None:
            level, fmt = found
            yield Found(path, lineno, macro, level, fmt)


def _one(path: str, src: str, pos: int, macro: str, args: list[str], rm: bool, kernel: bool,
         uvm: bool) -> tuple[str, str] | None:
    if macro in ("NV_PRINTF", "NV_PRINTF_COND", "NV_PRINTF_EX") and (rm or kernel):
        if len(args) < (3 if macro == "NV_PRINTF_EX" else 2) + (1 if macro == "NV_PRINTF_COND" else 0):
            return None
        level = _rm_level(args, macro)
        fmt = join_literals(args[{"NV_PRINTF": 1, "NV_PRINTF_COND": 3, "NV_PRINTF_EX": 2}[macro]])
        if level is None or fmt is None:
            return None
        if macro == "NV_PRINTF_EX":
            return level, fmt
        func = enclosing_function(src, pos) or "rmFunction"
        return level, f"NVRM: {func}: {fmt}"
    if macro in ("NV_ERROR_LOG", "NV_ERROR_LOG_DATA") and rm and len(args) >= 3:
        fmt = join_literals(args[2])
        if fmt is None:
            return None
        return "LEVEL_ERROR", (XID_PREFIX if macro == "NV_ERROR_LOG" else "NVRM: ") + fmt
    if macro == "nv_printf" and (kernel or rm) and len(args) >= 2 and args[0] == "NV_DBG_ERRORS":
        fmt = join_literals(args[1])
        return ("NV_DBG_ERRORS", fmt) if fmt is not None else None
    if macro in ("NV_DEV_PRINTF", "NV_DEV_PRINTF_STATUS") and (kernel or rm) and args[0] == "NV_DBG_ERRORS":
        i = 2 if macro == "NV_DEV_PRINTF" else 3
        fmt = join_literals(args[i]) if len(args) > i else None
        if fmt is None:
            return None
        if macro == "NV_DEV_PRINTF_STATUS":
            fmt += " (0x%x)\\n"
        return "NV_DBG_ERRORS", DEV_PREFIX + fmt
    if macro.startswith("UVM_ERR_PRINT_ALWAYS") and uvm and args:
        fmt = join_literals(args[0])
        return ("KERN_ERR", UVM_PREFIX + fmt) if fmt is not None else None
    return None


def extract(git_dir: str, tag: str) -> list[Found]:
    paths = [p.split(":", 1)[1] for p in git(git_dir, "grep", "-l", "-E",
                                             r"NV_PRINTF|NV_ERROR_LOG|nv_printf|NV_DEV_PRINTF|UVM_ERR_PRINT_ALWAYS",
                                             tag, "--", "src/nvidia", "kernel-open").splitlines()]
    out: list[Found] = []
    for path in paths:
        if not path.endswith((".c", ".h")):
            continue
        out.extend(scan_file(path, git(git_dir, "show", f"{tag}:{path}")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--git-dir", required=True)
    ap.add_argument("--tag", action="append", required=True, help="newest first; several: the union")
    ap.add_argument("-o", "--output", default="-")
    ns = ap.parse_args(argv)
    seen: dict[str, tuple[str, Found]] = {}
    for tag in ns.tag:
        for f in extract(ns.git_dir, tag):
            seen.setdefault(f.fmt, (tag, f))
    rows = sorted(seen.values(), key=lambda tf: (tf[1].path, tf[1].line, tf[0]))
    text = "".join(f"{tag}\t{f.path}:{f.line}\t{f.macro}\t{f.level}\t{f.fmt}\n" for tag, f in rows)
    header = (f"# NVIDIA driver error-level formats that reach the kernel log; tags {', '.join(ns.tag)}; "
              f"{len(rows)} formats\n# generated by benchmarks/extract_driver_errors.py: "
              "tag<TAB>file:line<TAB>macro<TAB>level<TAB>format\n")
    if ns.output == "-":
        sys.stdout.write(header + text)
    else:
        with open(ns.output, "w", encoding="utf-8") as fh:
            fh.write(header + text)
    by_macro: dict[str, int] = {}
    for _, f in rows:
        by_macro[f.macro] = by_macro.get(f.macro, 0) + 1
    print(f"{len(rows)} formats: " + ", ".join(f"{k} {v}" for k, v in sorted(by_macro.items())), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

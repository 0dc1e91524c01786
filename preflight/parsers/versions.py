"""Version strings a fleet must agree on: OFED/DOCA, the running kernel, the NCCL library.

`ofed_info -s` ("MLNX_OFED_LINUX-5.8-3.0.7.0:", "OFED-internal-24.04-0.6.6:", a DOCA release), `uname
-r`, and the libnccl file names a library folder holds (`libnccl.so.2.21.5`: the full version is in the
name). Driver/CUDA versions come from `nvidia-smi -q` facts, HCA firmware from RDMA port facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from preflight.framing import Doc
from preflight.parsers.base import ParserSpec


@dataclass
class Version:
    value: str | None  # None: the output held no version


def _lines(doc: Doc) -> list[str]:
    return [ln.text.strip() for ln in doc.lines if ln.text.strip()]


def parse_ofed(doc: Doc) -> Version:
    text = "\n".join(_lines(doc))
    m = re.search(r"((?:MLNX_OFED_LINUX|OFED-internal|DOCA|doca)[-\w.]*?)(?::|\s|$)", text)
    if m:
        return Version(m.group(1))
    first = _lines(doc)[:1]
    return Version(first[0] if first and not re.search(r"not found|No such|error", first[0], re.I) else None)


def parse_kernel_release(doc: Doc) -> Version:
    for t in _lines(doc):
        if re.fullmatch(r"\d+\.\d+[\w.+~-]*", t):
            return Version(t)
    return Version(None)


def parse_nccl_libs(doc: Doc) -> Version:
    found = re.findall(r"libnccl\.so\.(\d+\.\d+\.\d+)", "\n".join(_lines(doc)))
    return Version(max(found, key=lambda v: tuple(int(x) for x in v.split("."))) if found else None)


PARSERS = [ParserSpec("ofed", parse_ofed), ParserSpec("uname-r", parse_kernel_release),
           ParserSpec("nccl-libs", parse_nccl_libs)]

__all__ = ["PARSERS", "Version", "parse_kernel_release", "parse_nccl_libs", "parse_ofed"]

"""py-spy dump text as facts: processes, their threads and Python frames."""

from __future__ import annotations

from dataclasses import dataclass, field

from preflight import lazyre

_PS_PROC = lazyre.compile(r"^Process (\d+): (.*)$")
_PS_THREAD = lazyre.compile(r"^Thread (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\)(?:: \"(.*)\")?")
FRAME_INDENT = 4  # py-spy indents a thread's frames by 4 spaces
_PS_FRAME = lazyre.compile(r"^\s+(\S.*?) \((.*?)(?::(\d+))?\)\s*$")


@dataclass
class PySpyThread:
    tid: str
    state: str
    name: str
    frames: list[str] = field(default_factory=list)  # innermost first, "func (file:line)"


@dataclass
class PySpyProcess:
    pid: int
    cmdline: str
    python: str = ""
    threads: list[PySpyThread] = field(default_factory=list)

    def main_thread(self) -> PySpyThread | None:
        return next((t for t in self.threads if t.name == "MainThread"), self.threads[0] if self.threads else None)


def parse_py_spy(text: str) -> list[PySpyProcess]:
    """`py-spy dump --pid P` output (one or several) -> processes and thread stacks."""
    procs: list[PySpyProcess] = []
    thread: PySpyThread | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        mp = _PS_PROC.match(line)
        if mp:
            procs.append(PySpyProcess(pid=int(mp.group(1)), cmdline=mp.group(2).strip()))
            thread = None
            continue
        if not procs:
            continue
        if line.startswith("Python v"):
            procs[-1].python = line.split()[1]
            continue
        mt = _PS_THREAD.match(line)
        if mt:
            thread = PySpyThread(tid=mt.group(1), state=mt.group(2), name=mt.group(3) or "")
            procs[-1].threads.append(thread)
            continue
        # a frame is indented 4; its Arguments:/Locals: blocks (`--locals`) deeper, and skipped
        mf = _PS_FRAME.match(line)
        if thread is not None and mf and len(line) - len(line.lstrip()) <= FRAME_INDENT:
            where = mf.group(2) + (f":{mf.group(3)}" if mf.group(3) else "")
            thread.frames.append(f"{mf.group(1)} ({where})")
    return procs

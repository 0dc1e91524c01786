"""Slurm job records as facts: `scontrol show job` and `sacct --parsable2` (node list, start time, state)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from preflight import lazyre


@dataclass
class SlurmJob:
    job_id: str = ""
    nodelist: str = ""
    start: str = ""  # ISO-like as Slurm prints it ("2026-11-23T09:02:11"), or ""
    end: str = ""
    state: str = ""
    exit_code: str = ""
    problem: str = ""


_KV_SLURM = lazyre.compile(r"(\w+)=(\S*)")


def parse_scontrol_job(text: str) -> SlurmJob:
    """`scontrol show job J` -> SlurmJob (first record)."""
    fields = dict(_KV_SLURM.findall(text))
    if "JobId" not in fields:
        return SlurmJob(problem=(text.strip().splitlines() or ["no output"])[0][:200])
    return SlurmJob(job_id=fields.get("JobId", ""), nodelist=fields.get("NodeList", "").replace("(null)", ""),
                    start=_slurm_time(fields.get("StartTime", "")), end=_slurm_time(fields.get("EndTime", "")),
                    state=fields.get("JobState", ""), exit_code=fields.get("ExitCode", ""))


def parse_sacct(text: str) -> SlurmJob:
    """`sacct -j J -X -n -P -o JobID,NodeList,Start,End,State,ExitCode` -> SlurmJob."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 6 and parts[0]:
            return SlurmJob(job_id=parts[0], nodelist="" if parts[1] in ("None assigned", "(null)") else parts[1],
                            start=_slurm_time(parts[2]), end=_slurm_time(parts[3]), state=parts[4],
                            exit_code=parts[5])
    return SlurmJob(problem=(text.strip().splitlines() or ["no output"])[0][:200])


def _slurm_time(v: str) -> str:
    v = v.strip()
    return v if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", v) else ""

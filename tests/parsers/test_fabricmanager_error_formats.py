"""Every fabric manager error-level format of the inventory (`fm-error-*` entries of
preflight/parsers/fabricmanager.inventory.toml), in the three ways operators hand it over: the
raw /var/log/fabricmanager.log record, the daemon's journal line (which carries no level), and
pasted after a shell prompt. Each must be read (its codes, or fabric.manager/unread-error), never a
PASS and never "not recognised"."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import tomllib

from preflight import registry
from preflight.analyze import analyze
from preflight.model import Result, Status

INVENTORY = Path(__file__).resolve().parents[2] / "preflight" / "parsers" / "fabricmanager.inventory.toml"
ENTRIES = [e for e in tomllib.loads(INVENTORY.read_text(encoding="utf-8"))["entry"] if e["id"].startswith("fm-error-")]
_HEADER = re.compile(r"^\[[A-Z][a-z]{2} \d\d \d{4} \d\d:\d\d:\d\d\] \[[A-Z]+\] \[tid \d+\] ")


def _raw(lines: list[str]) -> list[str]:
    return lines


def _journal(lines: list[str]) -> list[str]:
    return [f"Nov 25 10:11:{i:02d} gpu017 nv-fabricmanager[1234]: {_HEADER.sub('', ln)}" for i, ln in enumerate(lines)]


def _prompt(lines: list[str]) -> list[str]:
    return ["[root@gpu017 ~]# tail /var/log/fabricmanager.log", *lines, "[root@gpu017 ~]# "]


FRAMINGS = {"raw": _raw, "journal": _journal, "prompt": _prompt}


def _grade(text: str) -> list[Result]:
    return analyze(registry.load(), [Path("-")], profile_name="auto", stdin=io.BytesIO(text.encode()))


def test_the_inventory_lists_the_error_formats() -> None:
    assert len(ENTRIES) >= 13
    assert all(e["source"] and e["codes"] for e in ENTRIES)


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_error_format_is_read(entry: dict, framing: str) -> None:
    lines = entry["sample"].strip("\n").split("\n")
    text = "\n".join(FRAMINGS[framing](lines)) + "\n"
    results = _grade(text)
    assert not [r for r in results if "not recognised" in r.summary], [r.summary for r in results]
    fm = [r for r in results if r.check == "fabric.manager"]
    assert fm, f"{framing}: no fabric.manager result: {[r.summary for r in results]}"
    assert all(r.status is not Status.PASS for r in fm), [r.summary for r in fm]
    codes = {c for r in fm for c in r.facts.get("codes", [])}
    assert set(entry["codes"]) <= codes, f"{framing}: {sorted(codes)}"


def test_journal_line_without_level_in_error_words_is_unread_error() -> None:
    r = [x for x in _grade("Nov 25 10:11:12 gpu017 nv-fabricmanager[1234]: unable to open NVSwitch device "
                            "/dev/nvidia-nvswitch2\n") if x.check == "fabric.manager"][0]
    assert r.status is Status.WARN and r.facts["codes"] == ["fabric.manager/unread-error"]
    assert "unable to open NVSwitch device /dev/nvidia-nvswitch2" in r.evidence[0]


def test_journal_info_line_is_no_error() -> None:
    results = _grade("Nov 25 10:11:12 gpu017 nv-fabricmanager[1234]: Connected to 1 node.\n"
                     "Nov 25 10:11:13 gpu017 nv-fabricmanager[1234]: Successfully configured all the available "
                     "NVSwitches to route GPU NVLink traffic.\n")
    fm = [r for r in results if r.check == "fabric.manager"]
    assert fm and all("fabric.manager/unread-error" not in r.facts.get("codes", []) for r in fm)


@pytest.mark.parametrize("prefix", ["", "nv-fabricmanager[27360]: ", "Nov 25 10:11:12 gpu017 nv-fabricmanager[27360]: "])
def test_version_mismatch_bare_or_prefixed_fails(prefix: str) -> None:
    text = (f"{prefix}fabric manager NVIDIA GPU driver interface version 550.54.15 don't match with driver version "
            "550.90.07.\nPlease update with matching NVIDIA driver package.\n")
    r = [x for x in _grade(text) if x.check == "fabric.manager"][0]
    assert r.status is Status.FAIL and r.facts["codes"] == ["fabric.manager/version-mismatch"]
    assert r.facts["log_version_mismatch"] == {"fabric_manager": "550.54.15", "driver": "550.90.07"}


USAGE = ["Usage: nv-fabricmanager [options]", "Options include:", "[-h | --help]: Displays help information",
         "[-c | --config]: Provides Fabric Manager config file path/name which controls all the config options."]


@pytest.mark.parametrize("refusal", ["nv-fabricmanager: unrecognized option '--foo'", "nv-fabricmanager: invalid option -- 'x'"])
def test_usage_after_a_refused_option_fails(refusal: str) -> None:
    r = [x for x in _grade("\n".join([refusal, *USAGE]) + "\n") if x.check == "fabric.manager"][0]
    assert r.status is Status.FAIL and r.facts["codes"] == ["fabric.manager/bad-command-line"]
    assert refusal in r.evidence[0]


def test_usage_in_the_units_journal_fails() -> None:
    text = "\n".join(["Nov 25 10:11:11 gpu017 systemd[1]: Starting NVIDIA fabric manager service...",
                      *(f"Nov 25 10:11:12 gpu017 nv-fabricmanager[1234]: {u}" for u in USAGE),
                      "Nov 25 10:11:12 gpu017 systemd[1]: nvidia-fabricmanager.service: Control process exited, "
                      "code=exited, status=1/FAILURE"]) + "\n"
    r = [x for x in _grade(text) if x.check == "fabric.manager"][0]
    assert r.status is Status.FAIL and "fabric.manager/bad-command-line" in r.facts["codes"]


def test_usage_asked_for_is_no_failure() -> None:
    results = _grade("\n".join(["[root@gpu017 ~]# nv-fabricmanager -h", *USAGE]) + "\n")
    assert not [r for r in results if r.check == "fabric.manager" and r.status is Status.FAIL]

"""The helpers every parser shares (preflight/parsers/base.py): N/A spellings, numbers, flags,
PCI addresses, quoting, the GPU record."""

from __future__ import annotations

import pytest

from preflight.parsers import base
from preflight.parsers.base import (
    BROKEN_VALUES,
    NA_VALUES,
    Format,
    GpuRecord,
    ParserSpec,
    clean,
    short,
    to_bool,
    to_float,
    to_int,
)


def test_defaults_of_formats_and_parser_specs() -> None:
    f = Format("nvidia-smi-q", detect=lambda d: True)
    assert (f.priority, f.probe, f.description, f.probe_name) == (50, "", "", "nvidia-smi-q")
    assert Format("fm-journal", detect=lambda d: True, probe="fm-log").probe_name == "fm-log"
    assert ParserSpec("ping", parse=lambda d: None).prefix is False


@pytest.mark.parametrize("na", sorted(NA_VALUES))
def test_every_na_spelling_is_empty(na: str) -> None:
    assert clean(na) == "" and clean(na.upper()) == "" and clean(f"  {na}  ") == ""


def test_na_spellings_are_exactly_these() -> None:
    assert NA_VALUES == {"", "n/a", "[n/a]", "na", "not supported", "[not supported]", "unknown", "[unknown]",
                         "[unknown error]", "requested functionality has been deprecated",
                         "[requested functionality has been deprecated]", "[insufficient permissions]",
                         "insufficient permissions", "-"}
    assert base.BROKEN_VALUES == BROKEN_VALUES == {"[gpu is lost]", "[gpu requires reset]", "[unknown error]", "gpu is lost",
                             "[gpu is not accessible]"}


@pytest.mark.parametrize(("value", "out"), [(None, ""), (" H100 ", "H100"), ("N/A", ""), ("0", "0"), ("--", "--")])
def test_clean(value: str | None, out: str) -> None:
    assert clean(value) == out


@pytest.mark.parametrize(("value", "out"), [
    ("4", 4), ("0 us", 0), ("2560 bank(s)", 2560), ("x16", 16), ("X8", 8), ("-3 C", -3), (" 7", 7), (12, 12),
    (None, None), (True, None), (False, None), ("N/A", None), ("text 5", None), ("", None), ("[N/A]", None)])
def test_to_int(value: object, out: int | None) -> None:
    assert to_int(value) == out


@pytest.mark.parametrize(("value", "out"), [
    ("4", 4.0), ("3.5 W", 3.5), ("-1.25", -1.25), (" 70.00 W", 70.0), (2, 2.0), (2.5, 2.5), (None, None),
    (True, None), (False, None), ("N/A", None), ("W 3", None), ("1.", 1.0)])
def test_to_float(value: object, out: float | None) -> None:
    got = to_float(value)
    assert got == out and (got is None or isinstance(got, float))


@pytest.mark.parametrize(("value", "out"), [
    ("Yes", True), ("Active", True), ("true", True), ("Enabled", True), ("On", True), ("1", True),
    ("No", False), ("Not Active", False), ("False", False), ("Disabled", False), ("off", False), ("0", False),
    ("None", False), ("N/A", None), (None, None), ("maybe", None), (True, True), (False, False), ("[Unknown]", None)])
def test_to_bool(value: object, out: bool | None) -> None:
    assert to_bool(value) is out


@pytest.mark.parametrize(("text", "out"), [
    ("00000000:9B:00.0", "0000:9b:00"), ("0000:9b:00", "0000:9b:00"), ("9B:00.0", "0000:9b:00"),
    ("00000001:1:0.0", "0001:01:00"), (" 0008:06:00 ", "0008:06:00"), ("not an address", "not an address"),
    ("a:b:c:d", "a:b:c:d"), ("ABC", "abc"), ("0000:123:456", "0000:23:56")])
def test_pci_id(text: str, out: str) -> None:
    base.pci_id.cache_clear()  # an answer cached by an earlier test is not this call's
    assert base.pci_id(text) == out


def test_short() -> None:
    assert short("x" * 300) == "x" * 300
    assert short("x" * 301) == "x" * 297 + "..." and len(short("x" * 301)) == 300
    assert short("abcdef  \n", limit=6) == "abcdef" and short("abcdefg", limit=6) == "abc..."


def test_gpu_record() -> None:
    g = GpuRecord(index=3)
    assert g.label == "GPU 3" and g.evidence() == "GPU 3" and g.evidence(("name",)) == "GPU 3"
    assert g.name is None and g.broken == [] and g.mig_devices == 0 and g.cells == {}
    g = GpuRecord(index=0, bus_id="00000000:18:00.0", line="| 0 H100 |", cells={"name": "H100", "pstate": "P0"})
    assert g.label == "GPU 0 (00000000:18:00.0)"
    assert g.evidence() == "| 0 H100 |" and g.evidence(("pstate", "absent", "name")) == \
        "GPU 0 (00000000:18:00.0): pstate=P0, name=H100"
    facts = g.as_facts()
    assert facts["bus_id"] == "00000000:18:00.0" and not {"cells", "line", "broken"} & set(facts)
    assert base.__all__ and set(base.__all__) >= {"clean", "pci_id", "to_int", "GpuRecord"}

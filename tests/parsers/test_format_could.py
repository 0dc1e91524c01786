"""A format's cheap necessary condition (`Format.could`) never refuses a document its detector
recognises: over every fixture, example capture and corpus file (each as framed, and each line
block under the framings a paste adds), `detect(doc)` implies `could(doc)`. A wrong word list
makes analyze skip a detector it needed, so a file goes unrecognised: this test is what says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.analyze import classify, decode
from preflight.engine import Config, load_registry
from preflight.framing import Doc, frame
from preflight.parsers.base import Format

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
FRAMINGS = (
    lambda t: t,
    lambda t: "\n".join(f"2026-12-05T10:00:{i % 60:02d}+0000 node7 app[12]: {ln}"
                        for i, ln in enumerate(t.splitlines())),  # journal short-iso
    lambda t: "$ cmd\n" + "\n".join(f"node7: {ln}" for ln in t.splitlines()),  # pdsh, after a prompt
)


def _texts() -> list[tuple[str, str]]:
    files = [p for base in (ROOT / "tests" / "fixtures", ROOT / "examples", CORPUS) if base.is_dir()
             for p in sorted(base.rglob("*")) if p.is_file() and p.suffix not in (".md", ".toml", ".py")]
    out = []
    for p in files:
        text, problem = decode(p.read_bytes()[:2 << 20])
        if text and problem != "binary content":
            out.append((str(p.relative_to(ROOT.parent)), text))
    return out


@pytest.fixture(scope="module")
def registry():
    return load_registry([], Config())


@pytest.fixture(scope="module")
def docs() -> list[tuple[str, Doc]]:
    out = []
    for name, text in _texts():
        for i, how in enumerate(FRAMINGS):
            if i and len(text) > 20_000:
                continue  # the large logs once, as they are
            out += [(f"{name}#{i}", d) for d in frame(how(text), origin=name).docs]
    return out


def _guarded(registry) -> list[Format]:
    return [f for f in registry.formats.values() if f.could is not None]


def test_the_costly_detectors_have_a_cheap_condition(registry):
    names = {f.name for f in _guarded(registry)}
    assert {"ping", "nccl-tests", "fm-log", "nvidia-smi-error", "kernel-log", "ibstat", "fm-service", "ip-addr", "fr-trace", "nvidia-smi-q"} <= names


def test_a_line_without_any_word_is_no_tool_error(docs):
    """`nvsmi_errors.any_word` lets every line through that one of the error patterns reads."""
    from preflight.parsers.nvsmi_errors import PATTERNS, any_word

    lines = {ln.text.strip() for _, d in docs for ln in d.lines}
    lines |= {"couldn't communicate with the NVIDIA driver", "NVML: device count is 0", "Unable to reset this GPU",
              "nvidia-smi: command not found", "infoROM is corrupted at gpu 0000:17:00.0", "GPU is lost",
              "GPU 00000000:55:00.0: In use by another client", "NVML_ERROR_LIB_RM_VERSION_MISMATCH"}
    missed = [t for t in lines if any(p.search(t) for _, p, _, _ in PATTERNS) and not any_word(t)]
    assert missed == []
    assert not any_word("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)")
    assert any_word("NVML_ERROR_LIB_RM_VERSION_MISMATCH") and any_word("gpu requires RESET")


@pytest.fixture(scope="module")
def verdicts(registry, docs) -> dict[str, list[tuple[str, bool, bool]]]:
    """Per guarded format: (document, detect, could) of every document."""
    return {f.name: [(name, bool(f.detect(d)), bool(f.could(d))) for name, d in docs]
            for f in _guarded(registry)}


def test_could_never_refuses_what_detect_recognises(verdicts, docs):
    assert len(docs) > 400
    wrong = [(name, fmt) for fmt, rows in verdicts.items() for name, det, could in rows if det and not could]
    assert wrong == []
    assert all(any(det for _, det, _ in rows) for rows in verdicts.values())  # each recognises some document


def test_each_condition_refuses_most_other_documents(verdicts):
    """A condition that lets everything through saves nothing: each refuses most documents
    that its detector does not recognise (as saved: a log framing lets the kernel log's through)."""
    for fmt, rows in verdicts.items():
        others = [could for name, det, could in rows if not det and name.endswith("#0")]
        assert sum(1 for could in others if not could) > len(others) // 2, fmt


def test_classification_is_the_same_with_and_without_the_conditions(registry, docs):
    """Every document gets the same formats when no condition is consulted."""
    plain = {k: Format(f.name, f.detect, f.description, f.priority, f.probe) for k, f in registry.formats.items()}
    with_could = [(name, [f.name for f in classify(d, registry)]) for name, d in docs[::5]]
    saved = registry.formats
    registry.formats = plain
    try:
        without = [(name, [f.name for f in classify(d, registry)]) for name, d in docs[::5]]
    finally:
        registry.formats = saved
    assert with_could == without

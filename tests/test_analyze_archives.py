"""analyze reading bundles: zip and tar members graded per node, in memory, under the caps;
a member can name no place outside the archive, and links are never followed."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from preflight import analyze as an
from preflight import registry
from preflight.model import Status

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def _dmesg(bad: bool) -> bytes:
    line = XID79 if bad else "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07"
    return f"[ 1.0] {line}\n".encode()


def _xid(results: list) -> dict[str, Status]:
    return {r.node: r.status for r in results if r.check == "gpu.xid"}


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def test_zip_bundle_is_graded_per_node_and_names_each_member(tmp_path: Path) -> None:
    z = _zip(tmp_path / "b.zip", {"b/n1/dmesg.txt": _dmesg(True), "b/n2/dmesg.txt": _dmesg(False), "b/n3/": b""})
    res = an.analyze(registry.load(), [z])
    assert _xid(res) == {"n1": Status.FAIL, "n2": Status.PASS}
    assert {r.source for r in res if r.check == "gpu.xid"} == {f"{z}!b/n1/dmesg.txt", f"{z}!b/n2/dmesg.txt"}


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_member_naming_a_place_outside_the_archive_is_left_out(tmp_path: Path, kind: str) -> None:
    members = {"b/n1/dmesg.txt": _dmesg(False), "../n9/dmesg.txt": _dmesg(True), "b/../../n8/dmesg.txt": _dmesg(True)}
    path = _zip(tmp_path / "b.zip", members) if kind == "zip" else _tar(tmp_path / "b.tar.gz", members)
    entries = an.entries([path])
    assert [e.display for e in entries] == [f"{path}!b/n1/dmesg.txt"]
    assert _xid(an.analyze(registry.load(), [path])) == {"n1": Status.PASS}


def test_tar_links_are_never_materialised(tmp_path: Path) -> None:
    t = _tar(tmp_path / "b.tar.gz", {"b/n1/dmesg.txt": _dmesg(True)}, links={"b/n2/dmesg.txt": "/etc/passwd"})
    assert [e.display for e in an.entries([t])] == [f"{t}!b/n1/dmesg.txt"]
    assert _xid(an.analyze(registry.load(), [t])) == {"n1": Status.FAIL}


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_too_many_members_is_refused_with_the_count(tmp_path: Path, kind: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(an, "ARCHIVE_MAX_FILES", 3)
    members = {f"b/n{i}/dmesg.txt": _dmesg(False) for i in range(5)}
    path = _zip(tmp_path / "b.zip", members) if kind == "zip" else _tar(tmp_path / "b.tar.gz", members)
    (entry,) = an.entries([path])
    assert entry.load is None and entry.problem.startswith("archive refused: ")
    assert "(more than 3)" in entry.problem if kind == "zip" else "more than 3 members" in entry.problem
    (res,) = an.analyze(registry.load(), [path])
    assert res.check == an.UNKNOWN_CHECK and res.status is Status.SKIP and "archive refused" in res.summary


def test_a_zip_member_expanding_past_the_ratio_limit_is_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(an, "_ratio_limit", lambda compressed: 1000)
    z = _zip(tmp_path / "b.zip", {"b/n1/dmesg.txt": _dmesg(False), "b/n2/big.txt": b"x" * 5000})
    (entry,) = an.entries([z])
    assert entry.problem == "archive refused: b.zip expands past 0 MiB; not read"

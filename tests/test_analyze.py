"""analyze on awkward inputs: each gives a clear result in bounded time and leaves nothing behind;
multi-host pastes (pdsh, srun -l) are graded per node, from files or standard input."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from preflight import analyze as an
from preflight import registry
from preflight.model import Status

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:1b:00): 13, pid=1, name=python3, Graphics SM Warp Exception"


def cli(args: list[str], stdin: str | None = None, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "preflight.cli", "analyze", *args, "--json"], input=stdin,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def results(p: subprocess.CompletedProcess[str]) -> list[dict]:
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)["results"]


def run(paths: list[Path]) -> list:
    return an.analyze(registry.load(), paths)


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readinto(self, b) -> int:  # type: ignore[override]
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k

    def readable(self) -> bool:
        return True


# --------------------------------------------------------------------------------------------
# awkward files


def test_fifo_is_reported_never_opened(tmp_path: Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "dmesg.txt").write_text(f"[ 1.0] {XID79}\n")
    t0 = time.monotonic()
    res = results(cli([str(fifo), str(tmp_path)], timeout=30))
    assert time.monotonic() - t0 < 20
    fifos = [r for r in res if r["check"] == "analyze.unrecognised" and "FIFO" in r["summary"]]
    assert len(fifos) == 2  # given directly, and met inside the folder
    assert any(r["check"] == "gpu.xid" and r["status"] == "fail" for r in res)


def test_symlink_cycles_are_followed_once(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "to_b").symlink_to(b)
    (b / "to_a").symlink_to(a)
    (a / "self").symlink_to(a)
    (b / "kern.log").write_text(f"Jun  3 10:12:01 gpu7 kernel: {XID79}\n")
    (a / "dangling").symlink_to(tmp_path / "nowhere")
    res = results(cli([str(a)], timeout=30))
    xid = [r for r in res if r["check"] == "gpu.xid"]
    assert len(xid) == 1 and xid[0]["status"] == "fail"
    assert any("dangling" in r["summary"] for r in res)


def test_tar_bomb_is_refused_without_expanding_it(tmp_path: Path):
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("bundle/n1/dmesg.txt")
        info.size = 300 * 1024 * 1024
        tar.addfile(info, io.BufferedReader(_Zeros(info.size)))
    assert bomb.stat().st_size < 2 * 1024 * 1024
    t0 = time.monotonic()
    res = results(cli([str(bomb)], timeout=60))
    assert time.monotonic() - t0 < 30
    [r] = res
    assert r["check"] == "analyze.unrecognised" and "archive refused" in r["summary"] and "expands past" in r["summary"]


def test_gzip_bomb_is_refused(tmp_path: Path):
    bomb = tmp_path / "kern.log.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as fh:
        chunk = b"A" * (1 << 20)
        for _ in range(300):
            fh.write(chunk)
    res = results(cli([str(bomb)], timeout=60))
    [r] = res
    assert r["status"] == "skip" and "expands past" in r["summary"]


def test_empty_archive_is_said(tmp_path: Path):
    p = tmp_path / "zeros.gz"
    p.write_bytes(gzip.compress(bytes(1 << 20)))  # a tar of end-of-archive blocks
    [r] = results(cli([str(p)]))
    assert r["status"] == "skip" and "empty archive" in r["summary"]


def test_gzip_log_is_read(tmp_path: Path):
    p = tmp_path / "kern.log.1.gz"
    p.write_bytes(gzip.compress(f"Jun  3 10:12:01 gpu7 kernel: {XID79}\n".encode()))
    res = results(cli([str(p)]))
    assert [(r["check"], r["status"]) for r in res] == [("gpu.xid", "fail")]


def test_zero_byte_binary_and_invalid_utf8(tmp_path: Path):
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "core.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    (tmp_path / "latin1.log").write_bytes(f"[ 1.0] caf\xe9 \xff\xfe\n[ 2.0] {XID79}\n".encode("latin-1"))
    res = results(cli([str(tmp_path)]))
    by = {Path(r["source"]).name: r for r in res}
    assert "empty file" in by["empty.log"]["summary"] and by["empty.log"]["status"] == "skip"
    assert "binary content" in by["core.bin"]["summary"]
    assert by["latin1.log"]["check"] == "gpu.xid" and by["latin1.log"]["status"] == "fail"
    assert any("invalid UTF-8 replaced" in e for e in by["latin1.log"]["evidence"])


def test_garbage_is_unrecognised_not_guessed(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("lunch at noon\nnothing to see\n" * 50)
    (tmp_path / "random.txt").write_bytes(os.urandom(5000).replace(b"\x00", b"x").decode("latin-1").encode())
    res = results(cli([str(tmp_path)]))
    assert {r["check"] for r in res} == {"analyze.unrecognised"}


def test_large_log_is_read_from_its_newest_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(an, "MAX_FILE_BYTES", 1 << 20)
    p = tmp_path / "dmesg.log"
    noise = "[Mon Jun  3 10:12:01 2024] mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged\n"
    with p.open("w") as fh:
        fh.write(f"[Mon Jun  3 10:00:00 2024] {XID13}\n")
        fh.write(noise * 40000)
        fh.write(f"[Mon Jun  3 10:12:09 2024] {XID79}\n")
    [r] = [x for x in run([p]) if x.check == "gpu.xid"]
    assert r.status is Status.FAIL and "Xid 79" in r.summary
    assert any("only the newest 1 MiB" in e for e in r.evidence)


def test_nothing_is_left_in_tmp(tmp_path: Path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    bundle = tmp_path / "b.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        data = f"[ 1.0] {XID79}\n".encode()
        info = tarfile.TarInfo("b/n1/dmesg.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    res = results(cli([str(bundle)], env={"TMPDIR": str(tmp)}))
    assert [(r["node"], r["status"]) for r in res] == [("n1", "fail")]
    assert list(tmp.iterdir()) == []


# --------------------------------------------------------------------------------------------
# several nodes in one input


def _pdsh(hosts: list[str], bad: str) -> str:
    lines = []
    for h in hosts:
        lines.append(f"{h}: [Mon Jun  3 10:12:01 2024] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07")
        if h == bad:
            lines.append(f"{h}: [Mon Jun  3 10:12:09 2024] {XID79}")
        lines.append(f"{h}: [Mon Jun  3 10:12:10 2024] mlx5_core 0000:17:00.0: Port module event: module 0")
    return "\n".join(sorted(lines, key=lambda ln: ln.split(" ", 1)[1])) + "\n"


def test_pdsh_output_on_stdin_is_graded_per_host():
    hosts = ["gpu001", "gpu002", "gpu003", "gpu004"]
    res = results(cli(["-"], stdin=_pdsh(hosts, "gpu003")))
    xid = {r["node"]: r["status"] for r in res if r["check"] == "gpu.xid"}
    assert xid == {"gpu001": "pass", "gpu002": "pass", "gpu003": "fail", "gpu004": "pass"}
    assert all(r["source"] == "<stdin>" for r in res)


def test_a_node_pdsh_could_not_reach_is_an_error_with_its_cause():
    text = _pdsh(["gpu001", "gpu002"], "gpu002")
    text += ("gpu003: ssh: connect to host gpu003 port 22: Connection refused\n"
             "pdsh@login01: gpu003: ssh exited with exit code 255\n"
             "pdsh@login01: gpu004: ssh exited with exit code 255\n")
    res = results(cli(["-"], stdin=text))
    by = {(r["node"], r["check"]): r for r in res}
    assert by[("gpu002", "gpu.xid")]["status"] == "fail" and by[("gpu001", "gpu.xid")]["status"] == "pass"
    assert by[("gpu003", "analyze.node")]["status"] == "error"
    assert "Connection refused" in by[("gpu003", "analyze.node")]["summary"]
    assert by[("gpu004", "analyze.node")]["status"] == "error"
    assert by[("gpu004", "analyze.node")]["facts"]["codes"] == ["analyze.node/not-reached"]
    assert by[("gpu004", "analyze.node")]["source"] == "<stdin>"


def test_clush_dshbak_output_is_graded_per_host_group(tmp_path: Path):
    text = ("---------------\ngpu[001-002]\n---------------\n"
            "[Mon Jun  3 10:12:01 2024] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07\n"
            "---------------\ngpu003\n---------------\n"
            f"[Mon Jun  3 10:12:09 2024] {XID79}\n")
    (tmp_path / "clush.txt").write_text(text)
    res = results(cli([str(tmp_path / "clush.txt")]))
    assert {r["node"]: r["status"] for r in res if r["check"] == "gpu.xid"} == {"gpu[001-002]": "pass",
                                                                               "gpu003": "fail"}


def test_srun_label_output_is_graded_per_task_named_by_host(tmp_path: Path):
    text = "".join(f"{t}: Jun  3 10:12:0{t} gpu00{t} kernel: {XID79 if t == 2 else XID13}\n" for t in range(3))
    (tmp_path / "srun.txt").write_text(text)
    res = results(cli([str(tmp_path / "srun.txt")]))
    assert {r["node"]: r["status"] for r in res if r["check"] == "gpu.xid"} == {
        "gpu000": "warn", "gpu001": "warn", "gpu002": "fail"}


def test_empty_stdin_is_a_clear_result():
    res = results(cli(["-"], stdin=""))
    assert [(r["check"], r["status"]) for r in res] == [("analyze.unrecognised", "skip")]


def test_a_pdsh_paste_compares_versions_across_its_nodes():
    rows = {"gpu001": "535.161.08", "gpu002": "535.161.08", "gpu003": "550.54.15"}
    text = "".join(f"{h}: driver_version, name\n{h}: {v}, NVIDIA H100 80GB HBM3\n" for h, v in rows.items())
    res = [r for r in run_text(text) if r.check == "cluster.versions"]
    assert {r.node: r.status for r in res} == {"gpu001": Status.PASS, "gpu002": Status.PASS, "gpu003": Status.FAIL}
    bad = next(r for r in res if r.node == "gpu003")
    assert "550.54.15" in bad.summary and "535.161.08" in bad.summary


def test_one_node_or_nothing_to_compare_adds_no_cross_node_result():
    one = "driver_version, name\n535.161.08, NVIDIA H100 80GB HBM3\n"
    assert not [r for r in run_text(one) if r.check.startswith("cluster.")]
    # two nodes, but a kernel log says nothing about versions: no comparison is shown
    assert not [r for r in run_text(_pdsh(["gpu001", "gpu002"], "gpu002")) if r.check.startswith("cluster.")]


def test_a_csv_row_with_an_extra_cell_is_not_dropped():
    text = ("index, name, pci.bus_id\n0, NVIDIA H100 80GB HBM3, 00000000:18:00.0\n"
            "1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, [GPU requires reset]\n")
    inv = next(r for r in run_text(text) if r.check == "gpu.inventory")
    assert inv.status is not Status.PASS
    assert any("requires reset" in e or "2A:00.0" in e for e in inv.evidence + [inv.summary]), inv


def run_text(text: str) -> list:
    from tests.conftest import analyze_text

    return analyze_text(text, name="paste.txt")

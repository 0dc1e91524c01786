"""A driver-stack finding names its one cause in a short line: the NVML library not found says
that and only that (not "or nvidia-smi is not installed" while nvidia-smi works), and where the
NVML probe looked for the library goes to the result's facts and its evidence (shown with
--verbose), not to the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from preflight import nvml_probe
from preflight.checks import gpu_health
from preflight.model import Result, Status
from preflight.parsers.nvsmi_errors import errors_in
from tests.conftest import capture, fixture_text, grade

SUMMARY_MAX = 160  # what one console line can carry beside the node and the check
HEAD = "==============NVSMI LOG==============\nDriver Version : 535.129.03\nCUDA Version : 12.2\n"


def shipped_probe(dirs: tuple[str, ...]) -> dict[str, Any]:
    """The NVML probe's JSON as a node prints it (isolated python, no site packages), looking in `dirs`."""
    text = Path(nvml_probe.__file__).read_text(encoding="utf-8")
    text = text.replace('if __name__ == "__main__":\n    sys.exit(main())', "")
    code = f"{text}\nprint(json.dumps(collect({dirs!r})))\n"
    p = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def no_system_library() -> None:
    try:
        nvml_probe.load(())
    except nvml_probe.NoLibrary:
        return
    pytest.skip("this machine has a libnvidia-ml.so.1 on the loader's path")


def driver_result(nvml: dict[str, Any], smi: str = HEAD) -> Result:
    res = grade("gpu.driver", {"nvidia-smi-q": capture("nvidia-smi-q", smi),
                               "nvml": capture("nvml", json.dumps(nvml) + "\n")})
    assert len(res) == 1, res
    return res[0]


def test_no_library_is_one_short_clause_and_the_folders_are_in_the_facts(tmp_path: Path) -> None:
    no_system_library()
    folders = tuple(str(tmp_path / f"lib{i}") for i in range(10))
    out = shipped_probe(folders)
    assert out["ok"] is False and out["error_type"] == "LibraryNotFound"
    assert out["error"] == "libnvidia-ml.so.1 not found", out["error"]
    assert out["searched"] == ["the loader's path (LD_LIBRARY_PATH, ld.so.cache)", *folders]
    r = driver_result(out)
    assert r.status is Status.WARN and r.facts["codes"] == ["gpu.driver/nvml-unusable-here"], r
    assert "nvidia-smi is not installed" not in r.summary and "or nvidia-smi" not in r.summary, r.summary
    assert r.summary.startswith("the NVML library (libnvidia-ml.so) was not found"), r.summary
    assert len(r.summary) < SUMMARY_MAX, (len(r.summary), r.summary)
    assert not any(f in r.summary for f in folders), r.summary
    assert r.facts["nvml_searched"] == out["searched"]
    assert r.evidence[0] == "NVML: libnvidia-ml.so.1 not found (LibraryNotFound)", r.evidence
    assert all(f in r.evidence[1] for f in folders), r.evidence  # the --verbose output holds them


def test_the_default_search_is_ten_folders_none_of_them_on_the_line() -> None:
    no_system_library()
    out = shipped_probe(nvml_probe.DRIVER_DIRS)
    assert len(nvml_probe.DRIVER_DIRS) == 10 and out["searched"][1:] == list(nvml_probe.DRIVER_DIRS)
    r = driver_result(out)
    assert len(r.summary) < SUMMARY_MAX and "/usr/lib" not in r.summary, r.summary
    for name in ("gpu.inventory", "gpu.health"):  # the other checks that read the probe say it as briefly
        res = grade(name, {"nvml": capture("nvml", json.dumps(out) + "\n")})
        bad = [x for x in res if x.status is not Status.PASS and "NVML" in x.summary]
        assert all(len(x.summary) < SUMMARY_MAX and "/usr/lib" not in x.summary for x in bad), bad


def test_a_library_that_cannot_be_loaded_says_so_and_keeps_each_failure(tmp_path: Path) -> None:
    no_system_library()
    for i in (1, 2):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "libnvidia-ml.so.1").write_text("not an ELF file\n")
    out = shipped_probe((str(tmp_path / "d1"), str(tmp_path / "d2")))
    assert out["error_type"] == "LibraryLoadError"
    assert out["error"].startswith(f"libnvidia-ml.so.1 cannot be loaded: {tmp_path / 'd1' / 'libnvidia-ml.so.1'}: ")
    assert out["error"].endswith("(+1 more)") and str(tmp_path / "d2") not in out["error"], out["error"]
    assert len(out["load_errors"]) == 2 and str(tmp_path / "d2") in out["load_errors"][1]
    r = driver_result(out)
    assert r.summary.startswith("the NVML library (libnvidia-ml.so) could not be loaded: "), r.summary
    assert r.facts["nvml_load_errors"] == out["load_errors"]


@pytest.mark.parametrize("line,summary", [
    ("NVML Shared Library Not Found", "the NVML library (libnvidia-ml.so) was not found"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display "
     "Driver is properly installed and present in your system.", "the NVML library (libnvidia-ml.so) was not found"),
    ("libnvidia-ml.so.1: cannot open shared object file: No such file or directory",
     "the NVML library (libnvidia-ml.so) was not found"),
    ("pynvml.nvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found",
     "the NVML library (libnvidia-ml.so) was not found"),
    ("bash: nvidia-smi: command not found", "nvidia-smi was not found on the PATH"),
    ("/bin/sh: 1: nvidia-smi: not found", "nvidia-smi was not found on the PATH"),
])
def test_each_missing_piece_is_named_alone(line: str, summary: str) -> None:
    (err,) = errors_in([line])
    assert err.kind == "library_missing" and err.summary == summary, err
    assert " or " not in err.summary


def test_nvidia_smi_missing_in_a_pasted_log_says_only_that() -> None:
    from tests.conftest import grade_text

    res = grade_text("gpu.driver", {"nvidia-smi-q": "bash: nvidia-smi: command not found\n"})
    assert len(res) == 1 and res[0].summary.startswith("nvidia-smi was not found on the PATH"), res
    assert "NVML" not in res[0].summary


def test_the_probe_json_of_a_missing_library_keeps_its_fixture_reading() -> None:
    r = driver_result(json.loads(fixture_text("nvidia-smi/nvml_libnotfound.json")))
    assert r.summary == ("the NVML library (libnvidia-ml.so) was not found: NVML: NVML Shared Library Not Found "
                         "(NVMLError_LibraryNotFound)"), r.summary
    assert r.facts["nvml_searched"] == []  # an older probe said nothing of where it looked


def test_the_shipped_probe_still_prints_one_object() -> None:
    program = gpu_health.PROBE_NVML.commands[0][2]
    p = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert p.returncode == 0 and len(p.stdout.strip().splitlines()) == 1, p
    assert "searched" in json.loads(p.stdout) or json.loads(p.stdout)["ok"] is True

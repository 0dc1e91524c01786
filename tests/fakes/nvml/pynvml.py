"""A stand-in for the NVML binding on machines without a GPU (tests and benchmarks only).

Put this folder on PYTHONPATH and point $PREFLIGHT_FAKE_DIR at a scenario holding
`nvml.json` (the shape `python -m preflight.nvml_probe` prints). Without that file NVML
behaves as on a machine with no driver: nvmlInit raises NVMLError_LibraryNotFound.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - the binding's own name
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Not Supported"


_STATE: dict[str, Any] = {}


def _data() -> dict[str, Any]:
    if not _STATE:
        raise NVMLError("Uninitialized")
    return _STATE


def nvmlInit() -> None:  # noqa: N802
    path = os.path.join(os.environ.get("PREFLIGHT_FAKE_DIR", ""), "nvml.json")
    if not os.path.isfile(path):
        raise NVMLError_LibraryNotFound()
    with open(path, encoding="utf-8") as fh:
        _STATE.update(json.load(fh))


def nvmlShutdown() -> None:  # noqa: N802
    _STATE.clear()


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    return str(_data().get("driver", ""))


def nvmlSystemGetNVMLVersion() -> str:  # noqa: N802
    return str(_data().get("nvml_version", "12." + str(_data().get("driver", ""))))


def nvmlSystemGetCudaDriverVersion() -> int:  # noqa: N802
    return int(_data().get("cuda_driver_version", 0))


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_data().get("gpus", []))


def nvmlDeviceGetHandleByIndex(i: int) -> dict[str, Any]:  # noqa: N802
    return dict(_data()["gpus"][i])


def _get(h: dict[str, Any], key: str) -> Any:
    if h.get(key) is None:
        raise NVMLError_NotSupported()
    return h[key]


def nvmlDeviceGetName(h: dict[str, Any]) -> str:  # noqa: N802
    return str(_get(h, "name"))


def nvmlDeviceGetUUID(h: dict[str, Any]) -> str:  # noqa: N802
    return str(_get(h, "uuid"))


def nvmlDeviceGetPciInfo(h: dict[str, Any]) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(busId=_get(h, "pci_bus_id"))


def nvmlDeviceGetVbiosVersion(h: dict[str, Any]) -> str:  # noqa: N802
    return str(_get(h, "vbios"))


def nvmlDeviceGetPersistenceMode(h: dict[str, Any]) -> int:  # noqa: N802
    return int(bool(_get(h, "persistence")))


def nvmlDeviceGetCurrPcieLinkGeneration(h: dict[str, Any]) -> int:  # noqa: N802
    return int(_get(h, "pcie_gen"))


def nvmlDeviceGetMaxPcieLinkGeneration(h: dict[str, Any]) -> int:  # noqa: N802
    return int(_get(h, "pcie_gen_max"))


def nvmlDeviceGetCurrPcieLinkWidth(h: dict[str, Any]) -> int:  # noqa: N802
    return int(_get(h, "pcie_width"))


def nvmlDeviceGetMaxPcieLinkWidth(h: dict[str, Any]) -> int:  # noqa: N802
    return int(_get(h, "pcie_width_max"))


def nvmlDeviceGetMigMode(h: dict[str, Any]) -> tuple[int, int]:  # noqa: N802
    mode = _get(h, "mig_mode")
    pending = h.get("mig_mode_pending", mode)
    return (1 if mode == "Enabled" else 0, 1 if pending == "Enabled" else 0)


def nvmlDeviceGetMemoryInfo(h: dict[str, Any]) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(total=int(_get(h, "memory_total_mib")) * 1024 * 1024)

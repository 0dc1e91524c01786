"""The facts `nvidia-smi -q` gives, whichever form printed them: the header and one block per GPU,
every field by its section path. `preflight.parsers.nvsmi_q` reads the text form into these,
`preflight.parsers.nvsmi_xml` the XML form (`-q -x`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from preflight.parsers.base import GpuRecord, clean, to_bool, to_int
from preflight.parsers.nvsmi_errors import ToolError

BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"

# the header above the GPU blocks (lower case -> as nvidia-smi prints it)
HEADER_KEYS = {k.lower(): k for k in ("Timestamp", "Driver Version", "CUDA Version", "Attached GPUs")}

# Sections and fields at the top level of a GPU block, in every release R450-R590 (lower case -> the
# spelling kept). Older spellings map to the newer one.
GPU_LEVEL: dict[str, str] = {k.lower(): k for k in (
    "Product Name", "Product Brand", "Product Architecture", "Display Mode", "Display Attached", "Display Active",
    "Persistence Mode", "Addressing Mode", "MIG Mode", "MIG Devices", "Accounting Mode",
    "Accounting Mode Buffer Size", "Driver Model", "Serial Number", "GPU UUID", "GPU PDI", "Minor Number",
    "VBIOS Version", "MultiGPU Board", "Board ID", "Board Part Number", "GPU Part Number", "FRU Part Number",
    "Module ID", "Platform Info", "Inforom Version", "Inforom BBX Object Flush", "GPU Operation Mode",
    "GPU C2C Mode", "GSP Firmware Version", "GPU Virtualization Mode", "GPU Reset Status", "GPU Recovery Action",
    "IBMNPU", "PCI", "Fan Speed", "Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters",
    "Sparse Operation Mode", "FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage",
    "Compute Mode", "Utilization", "Encoder Stats", "FBC Stats", "DRAM Encryption Mode", "ECC Mode", "ECC Errors",
    "Retired Pages", "Remapped Rows", "Temperature", "GPU Power Readings", "Power Readings",
    "GPU Memory Power Readings", "Module Power Readings", "Power Smoothing", "Workload Power Profiles",
    "EDPp Multiplier", "Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks",
    "Max Clocks", "Max Customer Boost Clocks", "Clock Policy", "Voltage", "Fabric", "Processes", "Capabilities",
    "Supported Clocks", "Accounted Processes", "Supported GPU Target Temp")}
GPU_LEVEL["clocks throttle reasons"] = "Clocks Event Reasons"  # R525 and older


@dataclass
class QGpu:
    """One GPU block of `nvidia-smi -q` (or of a fragment of it)."""

    index: int  # the GPU's index when known (index_known), else its position in the output
    bus_id: str  # as printed ("00000000:1B:00.0"); "" when the fragment does not show it
    fields: dict[str, str] = field(default_factory=dict)  # "Remapped Rows/Pending" -> "Yes"
    lines: dict[str, str] = field(default_factory=dict)  # path -> the line as printed (padding collapsed)
    index_known: bool = True

    def get(self, path: str) -> str | None:
        return self.fields.get(path)

    def line(self, path: str) -> str:
        return self.lines.get(path, path)

    def under(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(path, value) of every field below section `prefix` (direct and nested)."""
        p = prefix if prefix.endswith("/") else prefix + "/"
        for k, v in self.fields.items():
            if k.startswith(p):
                yield k, v

    @property
    def label(self) -> str:
        if self.bus_id:
            return f"GPU {self.index} ({self.bus_id})" if self.index_known else f"GPU {self.bus_id}"
        return f"GPU {self.index}" if self.index_known else f"GPU #{self.index + 1} of the excerpt (bus id not shown)"

    @property
    def name(self) -> str:
        return self.fields.get("Product Name", "")

    def find(self, *suffixes: str) -> str:
        """The value of the first field whose path ends with one of `suffixes` ("" when none)."""
        for suf in suffixes:
            for k, v in self.fields.items():
                if k == suf or k.endswith("/" + suf):
                    return clean(v)
        return ""

    def record(self) -> GpuRecord:
        f = self.find
        return GpuRecord(
            index=self.index, name=f("Product Name") or None, uuid=f("GPU UUID") or None, bus_id=self.bus_id or None,
            vbios=f("VBIOS Version") or None, persistence=to_bool(f("Persistence Mode")),
            pstate=f("Performance State") or None,
            pcie_gen=to_int(f("PCIe Generation/Current")), pcie_gen_max=to_int(f("PCIe Generation/Max")),
            pcie_width=to_int(f("Link Width/Current")), pcie_width_max=to_int(f("Link Width/Max")),
            mig_mode=f("MIG Mode/Current") or None, mig_pending=f("MIG Mode/Pending") or None,
            memory_total_mib=to_int(f("FB Memory Usage/Total")), util=to_int(f("Utilization/Gpu", "Utilization/GPU")),
            line=f"GPU {self.bus_id}" + (f" {self.name}" if self.name else ""),
            cells={k.split("/")[-1]: v for k, v in self.fields.items()})


@dataclass
class QReport:
    header: dict[str, str] = field(default_factory=dict)
    header_lines: dict[str, str] = field(default_factory=dict)
    gpus: list[QGpu] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    recognised: bool = False  # the text looked like nvidia-smi -q output
    nvml_library: str = ""  # "NVML library version: X" (printed under a version mismatch by newer drivers)
    nvml_library_line: str = ""
    command: str = ""  # the command line above the output, when the capture shows it
    selection: str = ""  # the GPUs the command selected with -i (index, bus id, UUID, or a list)
    excerpt: bool = False  # a grep'd or elided excerpt: lines may be missing

    @property
    def driver(self) -> str:
        return clean(self.header.get("Driver Version"))

    @property
    def cuda(self) -> str:
        return clean(self.header.get("CUDA Version"))

    @property
    def attached(self) -> int | None:
        return to_int(self.header.get("Attached GPUs"))

    @property
    def listing(self) -> bool:
        """The GPU blocks are a listing of the node's GPUs (not a grep'd section or one `-i N`)."""
        return bool(self.gpus) and self.attached == len(self.gpus) and all(g.bus_id for g in self.gpus)

    @property
    def records(self) -> list[GpuRecord]:
        return [g.record() for g in self.gpus]


__all__ = ["BUS", "GPU_LEVEL", "HEADER_KEYS", "QGpu", "QReport"]

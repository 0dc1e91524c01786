"""preflight.parsers.ethtool and preflight.parsers.sysfs: exact facts, odd values, detection."""

from __future__ import annotations

import pytest

from preflight.framing import Doc, frame
from preflight.parsers import ethtool, sysfs
from preflight.parsers.ethtool import EthLink
from tests.conftest import fixture_text


def doc(text: str, command: str = "") -> Doc:
    docs = frame(text).docs
    d = docs[0] if len(docs) == 1 else Doc.join(docs)
    if command:
        d.command = command
    return d


# ----------------------------------------------------------------------------- ethtool

def test_full_settings_and_bond() -> None:
    links = ethtool.parse(doc(fixture_text("ethtool/ethtool_bond1_unknown_speed_no_link.txt")
                              + fixture_text("ethtool/ethtool_ens3f0np0_400g_link_up.txt"))).links
    bond, nic = links
    assert (bond.name, bond.speed_mbps, bond.duplex, bond.lanes, bond.link_detected, bond.port, bond.autoneg) == (
        "bond1", None, "Unknown! (255)", None, False, "Other", "off")
    assert bond.lines == ["Settings for bond1:", "Speed: Unknown!", "Duplex: Unknown! (255)", "Port: Other",
                          "Auto-negotiation: off", "Link detected: no"]
    assert (nic.name, nic.speed_mbps, nic.duplex, nic.lanes, nic.link_detected, nic.port, nic.autoneg) == (
        "ens3f0np0", 400000, "Full", 4, True, "Direct Attach Copper", "on")


@pytest.mark.parametrize(("value", "mbps"), [("400000Mb/s", 400000), ("1000Mb/s", 1000), ("100Gb/s", 100000),
                                             ("2.5Gb/s", 2500), ("10mb/s", 10), ("Unknown!", None), ("", None)])
def test_speed_values(value: str, mbps: int | None) -> None:
    [link] = ethtool.parse(doc(f"Settings for eth0:\n\tSpeed: {value}\n\tLink detected: yes\n")).links
    assert link.speed_mbps == mbps


@pytest.mark.parametrize(("value", "want"), [("yes", True), ("no", False), ("YES", True), ("maybe", None)])
def test_link_detected_values(value: str, want: bool | None) -> None:
    [link] = ethtool.parse(doc(f"Settings for eth0:\n\tLink detected: {value}\n")).links
    assert link.link_detected is want


def test_blank_lines_inside_a_listing() -> None:
    [link] = ethtool.parse(doc("Settings for eth0:\n\tSpeed: 1000Mb/s\n\n\tLink detected: yes\n")).links
    assert link.link_detected is True


def test_lanes_not_a_number() -> None:
    [link] = ethtool.parse(doc("Settings for eth0:\n\tLanes: N/A\n\tSpeed: 1000Mb/s\n")).links
    assert link.lanes is None and link.speed_mbps == 1000


def test_grep_excerpt_names_the_device_from_the_command() -> None:
    d = doc("\tSpeed: 200000Mb/s\n\tLanes: 4\n\tDuplex: Full\n", command="ethtool -s eth4 | grep -A 2 'Speed: '")
    f = ethtool.parse(d)
    assert [(x.name, x.speed_mbps, x.lanes, x.duplex) for x in f.links] == [("eth4", 200000, 4, "Full")]
    assert ethtool.parse(doc("\tSpeed: 1000Mb/s\n")).links[0].name == "?"
    assert ethtool._device_from_command("sudo ethtool ens1f0np0 | grep Speed") == "ens1f0np0"
    assert ethtool._device_from_command("ethtool -i ens1 | head") == "ens1"
    assert ethtool._device_from_command("ip link") == ""


def test_unknown_keys_are_skipped_and_make_no_link() -> None:
    f = ethtool.parse(doc("\tSupported ports: [ FIBRE ]\n\tPHYAD: 0\n\tTransceiver: internal\nfoo\n"))
    assert f.links == []
    [link] = ethtool.parse(doc("Settings for eth0:\n\tPHYAD: 0\n\tMDI-X: on\n\tSpeed: 10Mb/s\n")).links
    assert link.lines == ["Settings for eth0:", "Speed: 10Mb/s"]


def test_excerpt_flag() -> None:
    assert not ethtool.parse(doc("Settings for eth0:\n\tSpeed: 1000Mb/s\n")).excerpt
    d = doc("Settings for eth0:\n\tSpeed: 1000Mb/s\n")
    d.filter = ["Speed"]
    assert ethtool.parse(d).excerpt
    d.filter, d.excerpt = [], True
    assert ethtool.parse(d).excerpt


@pytest.mark.parametrize(("text", "command", "want"), [
    ("Settings for eth0:\n\tSpeed: 1000Mb/s\n", "", True),
    ("Settings for eth0:\n\tLink detected: no\n", "", True),
    ("Settings for eth0:\n\tPort: Twisted Pair\n", "", False),
    ("\tSpeed: 1000Mb/s\n", "ethtool eth0 | grep Speed", True),
    ("\tSpeed: Unknown!\n", "ethtool eth0 | grep Speed", False),
    ("\tSpeed: 1000Mb/s\n", "", False),
    ("Speed: 1000Mb/s\nLink detected: yes\n", "", False),
])
def test_ethtool_detect(text: str, command: str, want: bool) -> None:
    assert ethtool.detect(doc(text, command)) is want


def test_ethtool_registration() -> None:
    assert [(f.name, f.priority) for f in ethtool.FORMATS] == [("ethtool", 55)]
    assert [p.probe for p in ethtool.PARSERS] == ["ethtool"]
    assert EthLink("x").speed_mbps is None and ethtool.EthtoolFacts().excerpt is False


# ----------------------------------------------------------------------------- sysfs

def test_speeds() -> None:
    text = ("/sys/class/net/ens9f0np0/speed:400000\n/sys/class/net/eno2/speed:-1\n"
            "grep: /sys/class/net/lo/speed: Invalid argument\n/sys/class/net/bond0/speed:2000 \n")
    assert sysfs.parse_speeds(doc(text)).mbps == {"ens9f0np0": 400000, "eno2": -1, "bond0": 2000}


def test_ib_devices() -> None:
    assert sysfs.parse_ib_devices(doc("mlx5_0\nmlx5_1\n\nmlx5_bond_0\n")) == sysfs.IbDevices(
        names=["mlx5_0", "mlx5_1", "mlx5_bond_0"], listed=True)
    assert sysfs.parse_ib_devices(doc("")) == sysfs.IbDevices(names=[], listed=True)
    failed = sysfs.parse_ib_devices(doc("mlx5_0\nls: cannot access '/sys/class/infiniband': No such file\n"))
    assert failed == sysfs.IbDevices(names=[], listed=False)


def test_env_keeps_only_communication_variables() -> None:
    text = ("export NCCL_SOCKET_IFNAME='=ens9f0np0'\ndeclare -x NCCL_IB_HCA=\"mlx5_0,mlx5_1\"\nGLOO_SOCKET_IFNAME=eth0\n"
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=1\nUCX_NET_DEVICES=mlx5_0:1\nCUDA_VISIBLE_DEVICES=0,1\n"
            "GLOO_DEVICE_TRANSPORT=TCP\nWANDB_API_KEY=secret\nPATH=/usr/bin\nNCCL_DEBUG= INFO \nNOT A VAR\n"
            "GLOO_TIMEOUT=5\nMY_NCCL_X=1\nNCCL_NET_PLUGIN=aws-ofi-X\n")
    assert sysfs.parse_env(doc(text)).vars == {
        "NCCL_SOCKET_IFNAME": "=ens9f0np0", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "GLOO_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "UCX_NET_DEVICES": "mlx5_0:1", "CUDA_VISIBLE_DEVICES": "0,1",
        "GLOO_DEVICE_TRANSPORT": "TCP", "NCCL_DEBUG": "INFO", "NCCL_NET_PLUGIN": "aws-ofi-X"}


@pytest.mark.parametrize(("text", "want"), [
    ("/sys/class/net/eth0/speed:1000\n", True),
    ("/sys/class/net/eth0/speed:1000\ngrep: /sys/class/net/lo/speed: Invalid argument\n", True),
    ("/sys/class/net/eth0/speed:1000\nx\ny\n", True),
    ("/sys/class/net/eth0/speed:1000\nx\ny\nz\n", False),
    ("", False),
    ("hello\n", False),
])
def test_speed_detect(text: str, want: bool) -> None:
    assert sysfs._looks_like_speed(doc(text)) is want


@pytest.mark.parametrize(("text", "want"), [
    ("NCCL_DEBUG=INFO\nPATH=/usr/bin\nHOME=/root\n", True),
    ("export NCCL_DEBUG=INFO\nA=1\nB=2\n", True),
    ("PATH=/usr/bin\nHOME=/root\nX=1\n", True),
    ("A=1\nB=2\nC=3\n", False),
    ("NCCL_DEBUG=INFO\nPATH=/usr/bin\n", False),
    ("NCCL_DEBUG=INFO\nPATH=/usr/bin\nthis is not a variable\n", False),
    ("N1=1\nN2=2\nN3=3\nN4=4\nN5=5\nN6=6\nN7=7\nN8=8\nPATH=/x\nnot one\n", True),
])
def test_env_detect(text: str, want: bool) -> None:
    assert sysfs._looks_like_env(doc(text)) is want


def test_sysfs_registration() -> None:
    assert [(f.name, f.probe or f.name, f.priority) for f in sysfs.FORMATS] == [("ip-speed", "ip-speed", 55),
                                                                               ("env", "env", 20)]
    assert [p.probe for p in sysfs.PARSERS] == ["ip-speed", "ib-devices", "env"]
    assert sysfs.Speeds().mbps == {} and sysfs.Env().vars == {} and sysfs.IbDevices() == sysfs.IbDevices([], False)

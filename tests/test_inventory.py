"""Hostlist expansion, files, the Slurm environment, and clear errors for malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.inventory import (
    HostlistError,
    compress,
    expand,
    from_environment,
    parse_hosts,
    valid_node_name,
)


@pytest.mark.parametrize("spec,expected", [
    ("gpu[001-003,020],login1", ["gpu001", "gpu002", "gpu003", "gpu020", "login1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
    ("a,b,a,c", ["a", "b", "c"]),
    ("gpu[1-2],gpu[2-3]", ["gpu1", "gpu2", "gpu3"]),
    ("node7.cluster.example", ["node7.cluster.example"]),
    ("10.0.0.1,10.0.0.2", ["10.0.0.1", "10.0.0.2"]),
    ("gpu[5]", ["gpu5"]),
])
def test_expand(spec: str, expected: list[str]) -> None:
    assert expand(spec) == expected


@pytest.mark.parametrize("spec,needle", [
    ("gpu[1-3", "unbalanced '['"),
    ("gpu1-3]", "unbalanced ']'"),
    ("gpu[3-1]", "descending range"),
    ("gpu[a-b]", "bad range"),
    ("gpu[1-2]],x", "unbalanced ']'"),
    ("gpu[[1-2]]", "nested"),
    ("gpu[1,,2]", "empty range item"),
    ("a,,b", "empty element"),
    ("", "empty hostlist"),
    ("gpu 1", "whitespace"),
    ("gpu;rm", "invalid host name"),
    ("gpu;rm -rf /", "whitespace"),
    ("-oProxyCommand=x", "invalid host name"),
    ("gpu[0-9999999]", "more than"),
    ("999.1.1.1", "invalid host name"),
])
def test_malformed(spec: str, needle: str) -> None:
    with pytest.raises(HostlistError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        expand(spec)


def test_host_file(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_text("# the rack\ngpu[01-02]\n\ngpu03  # spare\ngpu01\n")
    assert parse_hosts(f"@{f}") == ["gpu01", "gpu02", "gpu03"]
    bad = tmp_path / "bad"
    bad.write_text("gpu01\ngpu[1-\n")
    with pytest.raises(HostlistError, match=r"bad:2"):
        parse_hosts(f"@{bad}")
    with pytest.raises(HostlistError, match="cannot read"):
        parse_hosts(f"@{tmp_path / 'missing'}")
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(HostlistError, match="lists no hosts"):
        parse_hosts(f"@{tmp_path / 'empty'}")


def test_slurm_environment() -> None:
    assert from_environment({"SLURM_JOB_NODELIST": "n[1-2],x"}) == ["n1", "n2", "x"]
    assert from_environment({}) is None


def test_compress_round_trip() -> None:
    names = ["gpu001", "gpu002", "gpu003", "gpu020", "login1", "n1", "n2"]
    assert compress(names) == "gpu[001-003,020],login[1],n[1-2]" or expand(compress(names)) == names
    assert expand(compress(names)) == names


def test_valid_node_name() -> None:
    assert valid_node_name("gpu-01.example")
    assert not valid_node_name("a b") and not valid_node_name("$(x)") and not valid_node_name("")

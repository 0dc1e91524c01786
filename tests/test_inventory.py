"""Hostlist expansion, files, the Slurm environment, and clear errors for malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.inventory import (
    HostlistError,
    check_name,
    compress,
    difference,
    expand,
    from_environment,
    parse_hosts,
    union,
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


def test_check_name_is_the_one_validator() -> None:
    assert check_name("gpu-01.example") == "gpu-01.example"
    assert check_name("10.1.2.3") == "10.1.2.3"
    for bad in ("-oProxyCommand=x", "a b", "$(reboot)", "", "gpu;rm", "999.0.0.1"):
        with pytest.raises(HostlistError, match="not a plain host name"):
            check_name(bad)
    with pytest.raises(ValueError):  # a ValueError subclass: callers may catch either
        check_name("a\nb")


@pytest.mark.parametrize("spec,expected", [
    ("a[1-4]^a[2-3]", ["a1", "a4"]),
    ("gpu[01-64]^gpu[03,07]", [f"gpu{i:02d}" for i in range(1, 65) if i not in (3, 7)]),
    ("n[1-6]^n2^n[4-5]", ["n1", "n3", "n6"]),
    ("n[1-3],x^n2,y", ["n1", "n3", "x"]),  # each ^ term is a comma list; y was never there
    ("n[1-3]^m[1-9]", ["n1", "n2", "n3"]),
])
def test_negation(spec: str, expected: list[str]) -> None:
    assert expand(spec) == expected


@pytest.mark.parametrize("spec,needle", [
    ("n[1-3]^n[1-3]", "leaves no host"),
    ("n[1-2]^n1^n2", "leaves no host"),
    ("n1^", "empty term"),
    ("^n1", "empty term"),
    ("n[1-3]^^n1", "empty term"),
    ("n[1^3]", "bad range"),
    ("n[1-3^n2", "unbalanced"),
])
def test_bad_negation(spec: str, needle: str) -> None:
    with pytest.raises(HostlistError, match=needle):
        expand(spec)


def test_negation_with_host_files(tmp_path: Path) -> None:
    rack = tmp_path / "rack"
    rack.write_text("gpu[01-04]\n")
    broken = tmp_path / "broken"
    broken.write_text("gpu02 # RMA\ngpu09\n")
    assert parse_hosts(f"@{rack}^gpu03") == ["gpu01", "gpu02", "gpu04"]
    assert parse_hosts(f"gpu[01-04]^@{broken}") == ["gpu01", "gpu03", "gpu04"]
    assert parse_hosts(f"@{rack}^@{broken}^gpu01") == ["gpu03", "gpu04"]
    with pytest.raises(HostlistError, match="leaves no host"):
        parse_hosts(f"@{rack}^gpu[01-04]")
    with pytest.raises(HostlistError, match="cannot read"):
        parse_hosts(f"gpu01^@{tmp_path / 'missing'}")


def test_union_and_difference_keep_order_once_each() -> None:
    assert union(["b", "a"], ("a", "c"), iter(["d", "b"])) == ["b", "a", "c", "d"]
    assert union() == []
    assert difference(["n3", "n1", "n2", "n1"], {"n2", "zz"}) == ["n3", "n1"]
    assert difference([], ["a"]) == []


@pytest.mark.parametrize("names,text", [
    (["n08", "n09", "n10", "n11"], "n[08-11]"),  # a padded run that grows a digit-width-equal tail
    (["n9", "n10", "n11"], "n[9-11]"),  # unpadded: mixed widths in one range
    (["n098", "n099", "n100", "n1000"], "n[098-100],n1000"),  # wider than the padding: its own group
    (["n007", "n7", "n8"], "n007,n[7-8]"),  # n007 and n7 are different hosts
    (["n1", "n01"], "n1,n01"),
    (["n0", "n1"], "n[0-1]"),
    # a suffix after the number: Slurm rejects gpu[01-02]-ib ("Invalid hostlist"), so no brackets
    (["gpu01-ib", "gpu02-ib", "gpu04-ib"], "gpu01-ib,gpu02-ib,gpu04-ib"),
    (["r1-n1", "r1-n2", "r2-n1"], "r1-n[1-2],r2-n1"),
    (["n3", "n1", "n2", "n1", "n3"], "n[1-3]"),  # duplicates
    (["login", "n2", "n1"], "n[1-2],login"),
    (["10.0.0.1", "10.0.0.2", "10.0.0.4"], "10.0.0.[1-2,4]"),
    (["n5"], "n5"),
])
def test_compress_odd_cases_are_exact(names: list[str], text: str) -> None:
    assert compress(names) == text
    assert sorted(expand(text)) == sorted(set(names))


def test_compress_round_trips_large_irregular_sets() -> None:
    names = [f"gpu{i:03d}" for i in range(1, 1001) if i % 7] + [f"cpu{i}" for i in range(95, 120)] + ["head"]
    text = compress(names)
    assert text.startswith("gpu[001-006,008-013,") and text.endswith("],gpu1000,cpu[95-119],head")
    assert sorted(expand(text)) == sorted(names)


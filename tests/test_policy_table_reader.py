"""The policy table's plain-shape reader: the same data as tomllib, or it steps aside."""

from __future__ import annotations

import pytest
import tomllib

from preflight import policy

PLAIN = [
    '["a.b/c"]\nstatus = "fail"\nmeans = "x"\n',
    '# comment\n\n["a.b/c"]\nstatus = "fail"\n\n["a.b/d"]\nmeans = "y"\n',
    '["a"]\nk = "quote \\" inside"\n',
    '["a"]\nk = "\\u00e9 and \\t and \\\\"\n',
    '[bare]\nk="v"\r\n',
    '["a"]\nk = "a tab\there"\n',
    '["a"]\nk  =\t"spaced"\n',
]
OTHER = [
    '["a"]\nk = "v" # trailing comment\n',
    'k = "before any table"\n',
    '["a"]\n  k = "indented"\n',
    "[\"a\"]\nk = 'literal'\n",
    '["a"]\nk = """multi"""\n',
    '[a.b]\nk = "dotted header"\n',
    '["a"]\nk = 1\n',
    '["a"]\nk = "bad \\q escape"\n',
    '["a"]\n["a"]\n',
    '["a"]\nk = "1"\nk = "2"\n',
    '# a \x01 control character\n["a"]\nk = "v"\n',
    '["a"]\nk = "v"\rx = "w"\n',
    '[""]\nk = "v"\n',
]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_tables_read_as_tomllib_reads_them(text: str) -> None:
    assert policy._simple_toml(text) == tomllib.loads(text)


@pytest.mark.parametrize("text", OTHER)
def test_anything_else_is_left_to_tomllib(text: str) -> None:
    assert policy._simple_toml(text) is None


def test_the_packaged_table_takes_the_plain_path_with_the_same_codes() -> None:
    [path] = policy.packaged_tables()
    text = path.read_text(encoding="utf-8")
    fast = policy._simple_toml(text)
    assert fast is not None and fast == tomllib.loads(text)
    assert len(fast) > 400


def test_a_malformed_table_still_names_tomllibs_error() -> None:
    with pytest.raises(policy.PolicyError, match="t.toml: .*line 2"):
        policy.parse_table('["a.b/c"]\nstatus = "x" = "y"\n', "t.toml")

"""What the history tests share: a throwaway PostgreSQL server per test module."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import need
from tests.history import pg_bin as find_pg
from tests.history import postgres_server


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    need(find_pg() is not None, "PostgreSQL server binaries (apt-get install -y postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        need(False, "the psycopg package (pip install 'psycopg[binary]')")
    if os.geteuid() == 0:
        need(subprocess.run(["id", "postgres"], capture_output=True).returncode == 0,
             "a postgres user to run the server as (Debian's postgresql package creates it)")
    with postgres_server() as url:
        yield url

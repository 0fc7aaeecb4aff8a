"""Fixtures of the monitor's tests: a real PostgreSQL server, and the store on each backend."""
from __future__ import annotations

import itertools

import pytest

from tests.monitor.postgres import fresh_database, pg_bin, postgres_server

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_url():
    if pg_bin() is None:
        pytest.skip("PostgreSQL server not installed (scripts/monitor_deps.sh installs Debian's postgresql)")
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """An empty database on each backend the store supports."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'monitor.db'}"
    return fresh_database(request.getfixturevalue("postgres_url"), f"m1flow_test_{next(_databases)}")

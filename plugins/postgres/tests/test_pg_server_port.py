"""The test server's first start survives its free port being taken before ``postgres`` binds it.

``free_port()`` asks the kernel for a port and lets it go; ``postgres`` binds
it seconds later, after ``initdb``. Another process may bind that port
meanwhile, and the whole PostgreSQL session (every test of this plugin) then
failed with "postgres did not start". A first start moves to a new port; a
restart keeps its own (the tests' pools hold it).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import psycopg
import pytest
from pg_server import PostgresServer, ServerNotFound


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port some other process listens on, as a squatter between probe and bind would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        yield int(squatter.getsockname()[1])


def test_a_first_start_on_a_port_taken_meanwhile_moves_to_a_free_one(taken_port: int) -> None:
    try:
        server = PostgresServer()
    except ServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    server.port = taken_port  # what free_port() answered before the squatter bound it
    try:
        server.start()
        assert server.port != taken_port
        with psycopg.connect(server.admin_dsn("postgres"), connect_timeout=30) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.cleanup()


def test_a_restart_keeps_its_port_and_says_why_it_could_not_start(taken_port: int) -> None:
    try:
        server = PostgresServer()
    except ServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        server.start()
        server.kill()
        server.port = taken_port  # the port it served on, bound by someone else while it was down
        with pytest.raises(RuntimeError, match="Address already in use"):
            server.start()
        assert server.port == taken_port
    finally:
        server.cleanup()

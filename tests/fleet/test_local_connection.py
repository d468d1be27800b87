"""The `local` host's connection: commands run with bash on this machine (real processes)."""

from __future__ import annotations

import pytest

from sm120kit.inventory.host import Host
from sm120kit.runner.connection import LocalConnection


def _local() -> LocalConnection:
    return LocalConnection(Host("local", vars={"ansible_connection": "local"}))


@pytest.mark.timeout(60)
def test_stdin_longer_than_the_pipe_buffer_reaches_a_slow_reader() -> None:
    """A remote script goes on stdin; the child (a loaded host's Python) starts reading only
    after the first 0.2 s poll has timed out. Every byte must still arrive and stdin must be
    closed: before the fix the rest of a 90 KB smoke probe was never written, and the probe
    waited on stdin forever (seen under load in the provision tests)."""
    data = "x" * (1 << 20)
    res = _local().run("sleep 1; wc -c", stdin=data, timeout=30)
    assert res.exit_code == 0 and res.stdout.strip() == str(len(data))


def test_small_stdin_and_none() -> None:
    conn = _local()
    assert conn.run("cat", stdin="hello").stdout == "hello"
    assert conn.run("cat").stdout == ""


def test_a_reader_that_exits_early_does_not_hang_the_writer() -> None:
    res = _local().run("head -c 10 >/dev/null; echo done", stdin="y" * (1 << 20), timeout=30)
    assert res.exit_code == 0 and res.stdout.strip() == "done"

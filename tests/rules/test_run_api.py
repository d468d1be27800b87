"""One logged way to run anything on a host: `sm120kit.runner.host_context.HostContext`.

Every command, remote script and file copy of a host op goes through the context, which writes
it to the host log and counts it; the connection is private to that module. This test reads
the package's source (comments aside), so a new `ctx.conn.run(...)` or a bare
`run_script(conn, ...)` in an op fails here instead of skipping the host log unnoticed.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "sm120kit"

#: The run API itself, the connection it wraps (and its long-running processes), and where
#: run_script is defined.
ALLOWED = {
    "runner/host_context.py",
    "runner/connection.py",
    "runner/process.py",
    "remote/__init__.py",
}

#: What reaches a connection around the run API.
BYPASS = re.compile(r"\bctx\.conn\b|\.conn\.(run|put|get|sftp)\(|\brun_script\(|\.pgid_dir\b")


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of `path`, without comment lines (a comment may name the API)."""
    return [
        (number, line)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if not line.lstrip().startswith("#")
    ]


def test_nothing_reaches_a_connection_around_the_run_api() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in ALLOWED
        # Scripts that run on a host have no context: they are the host side.
        and path.relative_to(PACKAGE).parts[0] != "remote"
        for number, line in code_lines(path)
        if BYPASS.search(line)
    ]
    assert not found, "host access outside sm120kit/runner/host_context.py:\n" + "\n".join(found)


def test_the_context_has_no_public_connection() -> None:
    from sm120kit.runner.host_context import HostContext

    assert not hasattr(HostContext, "conn")


def test_a_connection_runs_no_scripts_of_its_own() -> None:
    """Remote scripts run through `HostContext.script` (logged), never a connection's own
    method; outside a run, `runner.pool.outside_run` gives the same logged context."""
    from sm120kit.runner.connection import Connection

    assert not hasattr(Connection, "script")

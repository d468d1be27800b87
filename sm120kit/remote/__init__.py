"""Stdlib-only scripts that run on hosts, shipped over SSH like Ansible modules.

Each script reads one JSON document from argv[1] and prints one JSON document on stdout.
The script travels on stdin (`python3 - ARGS`), so running one costs exactly one command.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from importlib import resources
from typing import Any

from ..connection import Connection
from ..errors import HostFailed


@cache
def script_source(name: str) -> str:
    """The source text of `sm120kit/remote/<name>.py`."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")


def script_command(python: str, args: dict[str, Any]) -> str:
    """The shell command that runs a script fed on stdin with JSON arguments."""
    return f"{shlex.quote(python)} - {shlex.quote(json.dumps(args, sort_keys=True))}"


def run_script(
    conn: Connection,
    name: str,
    args: dict[str, Any] | None = None,
    *,
    python: str | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run a remote script on `conn` and return its JSON result.

    A script that exits non-zero without printing JSON raises HostFailed with the tail of
    its stderr; one that prints JSON is returned as is (the JSON says what went wrong).
    """
    interpreter = python or conn.host.python
    result = conn.run(
        script_command(interpreter, args or {}), stdin=script_source(name), timeout=timeout
    )
    doc = parse_last_json(result.stdout)
    if doc is None:
        tail = (result.stderr.strip() or result.stdout.strip())[-800:]
        if result.exit_code == 127 or "not found" in tail and interpreter in tail:
            raise HostFailed(f"no Python at '{interpreter}' on the host ({tail.splitlines()[-1]})")
        if result.exit_code == 124:
            raise HostFailed(f"remote step {name} timed out after {timeout}s")
        raise HostFailed(f"remote step {name} failed (exit {result.exit_code}): {tail}")
    return doc


def parse_last_json(stdout: str) -> dict[str, Any] | None:
    """The last line of stdout that is a JSON object (scripts may print noise before it)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None

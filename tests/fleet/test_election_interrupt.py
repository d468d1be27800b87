"""A host waiting for another host's build, when the run is interrupted, is `interrupted`.

Real parts: the sshd fleet on loopback, the runner, the wheel cache and its in-run election,
a real local store. Simulated: the signal (the run is cancelled from a timer thread with
`connection.cancel_all`, as the runner's handler does on SIGINT), and, in one case, the
builder's end (its build closure raises Interrupted, as a killed command does).
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import Interrupted
from sm120kit.runner.connection import cancel_all, reset_cancel
from tests.support.wheel_cache_runs import Builds, config, hosts_of, obtain_run, tiny_inputs

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("case", "extra"),
    [
        # The builder's command is killed by the cancel: its waiters were waiting for it.
        ("builder interrupted", {}),
        # Waiting for a build_host outside this run (the cache wait): the signal ends it.
        ("build_host outside the run", {"build_host": "elsewhere"}),
    ],
)
def test_waiters_of_an_interrupted_run_are_interrupted(
    fleet: Any, tmp_path: Path, case: str, extra: dict[str, Any]
) -> None:
    names = ["gpu1", "gpu2", "gpu3"]
    hosts = hosts_of(fleet, names, f"wi-{secrets.token_hex(3)}", **{n: extra for n in names})
    if extra:
        builds = Builds()
        timer = threading.Timer(1.0, cancel_all, args=("SIGINT",))
    else:
        builds = Builds(delay=1.0, fail=Interrupted("SIGINT"))
        timer = threading.Timer(0.5, cancel_all, args=("SIGINT",))
    timer.start()
    try:
        res, _ = obtain_run(
            fleet, tmp_path, hosts, config(tmp_path / "c", wait_timeout=30.0), tiny_inputs(), builds
        )
    finally:
        timer.cancel()
        reset_cancel()
    statuses = {n: (h.status, h.error) for n, h in res.hosts.items()}
    assert all(s == "interrupted" for s, _ in statuses.values()), statuses
    assert all("SIGINT" in (e or "") for _, e in statuses.values()), statuses

"""bench/fleet.py never waits without a bound (`--later` once printed nothing for 600 s):
a provision past its limit ends the bench in one line naming the run and the limit, no
traceback; the profile launcher answers --help. The real provision runs are by hand
(docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import fleet  # noqa: E402


@pytest.mark.parametrize("limit", [0.001, 0.01])
def test_a_provision_past_its_limit_is_one_line(
    monkeypatch: pytest.MonkeyPatch, limit: float
) -> None:
    monkeypatch.setattr(fleet, "PROVISION_TIMEOUT_S", limit)
    with pytest.raises(SystemExit) as exc:
        fleet.controller(["provision", "-H", "h00"], {}, "later-h00")
    line = str(exc.value.code)
    assert "\n" not in line
    assert line.startswith("later-h00: `invoke provision -H h00` ran past")
    assert "Traceback" not in line


def test_profiled_launcher_helps() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "profiled.py"), "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("usage: profiled.py")

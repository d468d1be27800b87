"""User and system invoke config apply over the project's invoke.yaml (issue #45 class 8).

Real config files under a temporary HOME and the real `invoke` CLI (subprocess); nothing is
simulated. The project's invoke.yaml holds defaults (sm120kit/settings.py `config_layers`):
~/.invoke.yaml overrides it and `-f FILE` overrides that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke_env, run_invoke


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = invoke_env(None, tmp, **extra)
    env["HOME"] = str(tmp / "home")
    env.pop("INVOKE_SM120KIT_INVENTORY", None)
    (tmp / "home").mkdir(exist_ok=True)
    return env


def _user(tmp: Path, text: str) -> Path:
    path = tmp / "home" / ".invoke.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _inv(tmp: Path, host: str) -> Path:
    path = tmp / f"{host}.yaml"
    path.write_text(f"all:\n  hosts:\n    {host}:\n      ansible_connection: local\n")
    return path


def test_user_inventory_overrides_the_project_default(tmp_path: Path) -> None:
    _user(tmp_path, f"sm120kit:\n  inventory: {_inv(tmp_path, 'userhost')}\n")
    proc = run_invoke(["facts", "-H", "userhost"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("sm120kit:\n  forks: 0\n", "forks"),
        ("sm120kit:\n  lock_stale_after: nope\n", "lock_stale_after"),
    ],
)
def test_a_bad_user_value_is_one_line_naming_the_file(tmp_path: Path, text: str, word: str) -> None:
    path = _user(tmp_path, text)
    proc = run_invoke(["facts", "-H", "local"], _env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert str(path) in proc.stderr and word in proc.stderr


def test_a_runtime_file_beats_the_user_file(tmp_path: Path) -> None:
    _user(tmp_path, f"sm120kit:\n  inventory: {_inv(tmp_path, 'userhost')}\n")
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(f"sm120kit:\n  inventory: {_inv(tmp_path, 'runtimehost')}\n")
    proc = run_invoke(["-f", str(runtime), "facts", "-H", "runtimehost"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr

"""Install steps check the env, not only their record: drift made by hand is repaired.

The fake flash-attn (a path source that compiles nothing, tests/fixtures/fake_flash_attn) is
built and installed over the sshd fleet into a real venv, then changed by hand the ways a
person would: `pip uninstall`, files deleted, another version's metadata. Each time the next run reinstalls from the wheel cache (no build), says `changed`
and why, and the run after that is all `ok`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120kit.state import PyEnv, Toolkit
from tests.real.test_build_op import (
    assert_ok,
    fake_flash_attn,
    host,
    make_env,
    package_task,
    run_op,
    steps,
    toolkit,  # noqa: F401 - the session fixture
)
from tests.support.fleet import Fleet


def _dist_info(env: PyEnv) -> Path:
    [info] = Path(env.path).glob("lib/python*/site-packages/fake_flash_attn-*.dist-info")
    return info


def _uninstall(env: PyEnv) -> None:
    subprocess.run(
        [env.python, "-m", "pip", "uninstall", "-y", "-q", "fake-flash-attn"],
        check=True,
        capture_output=True,
    )


def _delete_module(env: PyEnv) -> None:
    [pkg] = Path(env.path).glob("lib/python*/site-packages/fake_flash_attn/__init__.py")
    pkg.unlink()


def _other_version(env: PyEnv) -> None:
    meta = _dist_info(env) / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 2.8.3", "Version: 2.7.0", 1))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_uninstall, "is not installed in"),
        (_delete_module, "files of flash-attn are gone"),
        (_other_version, "the env has flash-attn 2.7.0"),
    ],
    ids=["pip-uninstall", "files-deleted", "other-version"],
)
def test_drift_is_reinstalled_from_the_cache(
    fleet: Fleet,
    tmp_path: Path,
    toolkit: Toolkit,  # noqa: F811
    change: Callable[[PyEnv], None],
    says: str,
) -> None:
    env = make_env(tmp_path / "env")
    h = host(fleet, tmp_path, "drift", **fake_flash_attn())
    first = run_op(fleet, tmp_path, [h], package_task("flash-attn", toolkit, env))
    assert_ok(first)
    assert first.hosts["drift"].data["packages"]["flash-attn"]["wheel_from"] == "build"

    change(env)
    repaired = run_op(fleet, tmp_path, [h], package_task("flash-attn", toolkit, env))
    assert_ok(repaired)
    rec = repaired.hosts["drift"].data["packages"]["flash-attn"]
    status, message = steps(repaired, "drift")["install:flash-attn"]
    assert status == "changed" and says in message and "reinstall" in message, message
    assert says in rec["reinstall_reason"]
    assert rec["installed"] == "now"
    assert rec["wheel_from"].startswith("cache:"), rec["wheel_from"]  # not built again
    out = subprocess.run(
        [env.python, "-c", "import fake_flash_attn; print(fake_flash_attn.__file__)"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and str(tmp_path / "env") in out.stdout, out.stderr

    again = run_op(fleet, tmp_path, [h], package_task("flash-attn", toolkit, env))
    assert again.hosts["drift"].status == "ok", steps(again, "drift")
    assert all(s == "ok" for s, _ in steps(again, "drift").values())


def test_check_mode_says_it_would_reinstall(
    fleet: Fleet,
    tmp_path: Path,
    toolkit: Toolkit,  # noqa: F811
) -> None:
    env = make_env(tmp_path / "env")
    h = host(fleet, tmp_path, "drift", **fake_flash_attn())
    assert_ok(run_op(fleet, tmp_path, [h], package_task("flash-attn", toolkit, env)))
    _uninstall(env)
    plan = run_op(fleet, tmp_path, [h], package_task("flash-attn", toolkit, env), check_mode=True)
    status, message = steps(plan, "drift")["install:flash-attn"]
    assert status == "changed" and message.startswith("would reinstall"), message
    assert "is not installed in" in message
    # Check mode changed nothing: still missing.
    assert not list(Path(env.path).glob("lib/python*/site-packages/fake_flash_attn-*"))

"""Step ``install:<pkg>``: the wheel into the env, and whether the env still holds it.

``pip install --no-deps --force-reinstall --no-index`` into the env, skipped when
``<env>/.sm120kit/installed/<pkg>.json`` already records this key and wheel and the env still
holds that install (``remote/installed_dist.py``: present, all files of its RECORD there, the
recorded version); otherwise the wheel is fetched again and reinstalled, and the step says why.
"""

from __future__ import annotations

import os
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..remote.lib.names import install_record
from ..runner.host_context import HostContext
from ..runner.results import StepResult
from ..runner.step_run import run_steps
from ..state import PackageRecord, ProvisionState
from ..steps import Step, commands


def installed_marker(state: ProvisionState, name: str) -> str | None:
    if state.env is None:
        return None
    return install_record(state.env.path, name)


def env_drift(ctx: HostContext, state: ProvisionState, name: str, installed: dict[str, Any]) -> str:
    """Why the env no longer holds the install `installed` records ("" when it does): the
    distribution gone, files of it gone, or another version."""
    assert state.env is not None
    if installed.get("dist_present") is False:
        return ""  # its distribution is named otherwise: nothing to compare with
    env = state.env.path
    dist_name, wheel_version = _wheel_name(str(installed.get("wheel") or ""))
    dist = str(installed.get("dist") or dist_name or name)
    found = ctx.script("installed_dist", {"env": env, "name": dist}, timeout=120)
    if not found.get("present"):
        return f"{name} is not installed in {env} (removed by hand?)"
    if found.get("missing"):
        return f"files of {name} are gone from the env: {', '.join(found['missing'][:3])}"
    want = installed.get("dist_version") or wheel_version
    have = str(found.get("version") or "")
    if want and have and not _same_version(want, have):
        return f"the env has {name} {have}, the install record {want}"
    # Another build of the same version (another RECORD, kept as dist_record) is left to the
    # smoke step, which checks it afresh (its verdict is keyed on RECORD): reinstalling over a
    # build someone installed on purpose is not asked for (tests/real/test_provision.py).
    return ""


def _wheel_name(wheel: str) -> tuple[str, str]:
    """(distribution name, version) from a wheel's file name; ("", "") if it is not one."""

    try:
        parsed = parse_wheel_filename(os.path.basename(wheel))
    except (InvalidWheelFilename, ValueError):
        return "", ""
    return str(parsed[0]), str(parsed[1])


def _same_version(a: str, b: str) -> bool:

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def install(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    record: PackageRecord,
    marker_path: str,
    step: StepResult,
    why: str = "",
) -> None:
    """Step ``install:<pkg>``: run `install_steps` (what check mode shows is what runs)."""
    assert state.env is not None
    wheel = str(record.get("wheel") or f"<{name} wheel>")
    doc = {k: record.get(k) for k in ("version", "key", "sha256", "wheel", "wheel_from", "log")}
    steps = install_steps(
        state.env.python,
        state.env.path,
        wheel,
        marker_path,
        {"package": name, **doc},
        state.host.python,
    )
    verb = f"reinstall ({why}):" if why else "install"
    what = f"{verb} {os.path.basename(wheel)} into {state.env.path}"
    if not ctx.may_act(step, what, commands(steps)):
        return
    step.commands = commands(steps)
    run_steps(
        ctx,
        steps,
        failed=lambda s, answer: f"recording the {name} install failed: {answer.get('error')}",
        timeout=1800,
    )
    record["installed"] = "now"


def install_steps(
    python: str, env: str, wheel: str, marker_path: str, doc: dict[str, Any], host_python: str
) -> list[Step]:
    """The install as Steps (a pure planner): pip puts exactly this wheel in the env, nothing
    else; then remote/installed_dist.py writes the install record at `marker_path`: `doc` plus
    what pip left in the env (the next run's drift check, `env_drift`)."""
    argv = [python, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-index"]
    dist = _wheel_name(wheel)[0] or str(doc.get("package") or "")
    args = {"env": env, "name": dist, "record": marker_path, "doc": doc}
    return [
        Step("run", argv=[*argv, wheel]),
        Step("script", name="installed_dist", python=host_python, args=args),
    ]


__all__ = ["env_drift", "install", "install_steps", "installed_marker"]

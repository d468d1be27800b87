"""Step ``install:<pkg>``: the wheel into the env, and whether the env still holds it.

``pip install --no-deps --force-reinstall --no-index`` into the env, skipped when
``<env>/.sm120kit/installed/<pkg>.json`` already records this key and wheel and the env still
holds that install (``remote/installed_dist.py``: present, all files of its RECORD there, the
recorded version); otherwise the wheel is fetched again and reinstalled, and the step says why.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import time
from typing import Any

from ..runner.host_context import HostContext
from ..runner.results import StepResult
from ..state import ProvisionState
from ..steps import Step, render


def installed_marker(state: ProvisionState, name: str) -> str | None:
    if state.env is None:
        return None
    return posixpath.join(state.env.path, ".sm120kit", "installed", f"{name}.json")


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
    # build someone installed on purpose is not asked for (tests/test_provision.py).
    return ""


def _wheel_name(wheel: str) -> tuple[str, str]:
    """(distribution name, version) from a wheel's file name; ("", "") if it is not one."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        parsed = parse_wheel_filename(os.path.basename(wheel))
    except (InvalidWheelFilename, ValueError):
        return "", ""
    return str(parsed[0]), str(parsed[1])


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def install(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    record: dict[str, Any],
    marker_path: str,
    step: StepResult,
    why: str = "",
) -> None:
    assert state.env is not None
    wheel = record.get("wheel") or f"<{name} wheel>"
    # One Step: what check mode shows is the very command the install runs.
    [pip] = render(install_step(state.env.python, wheel))
    verb = f"reinstall ({why}):" if why else "install"
    if not ctx.may_act(step, f"{verb} {os.path.basename(wheel)} into {state.env.path}", [pip]):
        return
    doc = {
        "package": name,
        "version": record["version"],
        "key": record["key"],
        "sha256": record["sha256"],
        "wheel": record["wheel"],
        "wheel_from": record["wheel_from"],
        "log": record.get("log"),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    ctx.run(pip, timeout=1800, what=f"pip install {os.path.basename(wheel)}")
    # What pip left in the env, for the next run's drift check (env_drift).
    dist = _wheel_name(str(wheel))[0] or name
    found = ctx.script("installed_dist", {"env": state.env.path, "name": dist}, timeout=120)
    doc.update(
        dist=dist,
        dist_present=bool(found.get("present")),
        dist_version=found.get("version"),
        dist_record=found.get("record"),
    )
    ctx.run(
        f"mkdir -p {_q(posixpath.dirname(marker_path))} && "
        f"printf '%s' {_q(json.dumps(doc, sort_keys=True))} > {_q(marker_path)}",
        what=f"record the {name} install",
    )
    record["installed"] = "now"


def install_step(python: str, wheel: str) -> Step:
    """The install as a Step: pip puts exactly this wheel in the env, nothing else."""
    argv = [python, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-index"]
    return Step("run", argv=[*argv, wheel])


def _q(text: str) -> str:
    return shlex.quote(text)


__all__ = ["env_drift", "install", "install_step", "installed_marker"]

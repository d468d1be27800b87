"""A host whose serving env fails its check: the verdict is remembered like a pass, so a rerun
with nothing changed fails again at once with the old reason and the way to run the check
anyway (``--recheck``), instead of the same checks again; anything the verdict depends on
changed (here: a module of the env replaced) runs it again.

Real parts: the sshd fleet, pip's resolver drafting the lock from a loopback index, uv
installing it, the smoke probe importing the env's real ``sglang`` module, which fails for real
(a tiny wheel of that name whose ``__init__`` raises) and counts each import in a file outside
the env: the count proves whether the check ran. Simulated: the target GPU and driver (host
vars), as a GPU-less build box names them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.stack_hosts import (
    release_cache_with_uv,
    stack_inventory,
    tiny_recipes,
)
from tests.support.tiny_index import make_wheel, serve

pytestmark = pytest.mark.timeout(900)

BROKEN = """import os
with open({counter!r}, "a") as fh:
    fh.write("imported\\n")
raise ImportError("tiny sglang is broken on purpose")
"""
FIXED = """import os
with open({counter!r}, "a") as fh:
    fh.write("imported\\n")
__version__ = "0.0.1"
"""


def _imports(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def _smoke(proc: Any) -> dict[str, Any]:
    host = json_of(proc)["hosts"]["gpu5"]
    [step] = [s for s in host["steps"] if s["name"] == "stack smoke"]
    return {"host": host, "step": step}


def test_a_failed_check_is_remembered_until_its_inputs_change(
    fleet: Fleet, tmp_path: Path, uv_wheel: Path
) -> None:
    counter = tmp_path / "imports.txt"
    files = tmp_path / "index"
    make_wheel(
        files,
        "sglang",
        "0.0.1",
        extra={"sglang/__init__.py": BROKEN.format(counter=str(counter)).encode()},
    )
    with serve(files) as url:
        _check_memo(
            fleet,
            tmp_path,
            uv_wheel,
            tiny_recipes(tmp_path, (files, url), top="sglang==0.0.1"),
            counter,
        )


def _check_memo(fleet: Fleet, tmp_path: Path, uv_wheel: Path, recipes: Path, counter: Path) -> None:
    inv = stack_inventory(fleet, tmp_path, ("gpu5",))
    env = invoke_env(
        fleet,
        tmp_path,
        INVOKE_SM120KIT_RECIPES_DIR=str(recipes),
        SM120KIT_RELEASE_CACHE=release_cache_with_uv(tmp_path / "release-cache", uv_wheel),
        INVOKE_SM120KIT_CACHE_CONTROLLER=str(tmp_path / "controller-store"),
    )
    args = ["provision", "-H", "gpu5", "-i", str(inv), "--json"]
    first = run_invoke(args, env)
    assert first.returncode == 2, first.stdout[-3000:] + first.stderr[-3000:]
    got = _smoke(first)
    assert got["step"]["status"] == "failed"
    assert (
        "import sglang fails: ImportError: tiny sglang is broken on purpose"
        in (got["step"]["message"])
    )
    ran = _imports(counter)
    assert ran >= 1  # the check imported the module

    # Nothing changed: the same verdict at once, the check not run (the count stays).
    again = run_invoke(args, env)
    assert again.returncode == 2, again.stdout[-3000:] + again.stderr[-3000:]
    got = _smoke(again)
    message = got["step"]["message"]
    assert got["step"]["status"] == "failed" and message.startswith("check failed last time ("), (
        message
    )
    assert "tiny sglang is broken on purpose" in message
    assert "re-run it with invoke provision --recheck" in message
    assert got["host"]["stack_smoke"]["reused"] is True
    assert got["host"]["error"] and "check failed last time" in got["host"]["error"]
    assert _imports(counter) == ran

    # --recheck runs it again (and it fails again, for the same reason).
    rechecked = run_invoke([*args, "--recheck"], env)
    assert rechecked.returncode == 2
    got = _smoke(rechecked)
    assert got["step"]["status"] == "failed" and "broken on purpose" in got["step"]["message"]
    assert not got["step"]["message"].startswith("check failed last time")
    assert _imports(counter) > ran
    ran = _imports(counter)

    # The env changed behind the tool's back (the module replaced, as an editor or sed -i
    # would): no record says so, the stack step sees nothing to do, the check runs again.
    stack_env = Path(got["host"]["stack"]["env"])
    [module] = stack_env.glob("lib/python*/site-packages/sglang/__init__.py")
    part = module.with_suffix(".new")
    part.write_text(FIXED.format(counter=str(counter)))
    os.replace(part, module)
    fixed = run_invoke(args, env)
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    got = _smoke(fixed)
    stack_step = next(s for s in got["host"]["steps"] if s["name"] == "stack")
    assert stack_step["status"] == "ok"  # the stack itself is as locked
    assert got["step"]["status"] == "ok" and _imports(counter) > ran
    ran = _imports(counter)

    # And the pass is remembered in turn.
    last = run_invoke(args, env)
    assert last.returncode == 0
    got = _smoke(last)
    assert got["step"]["message"].startswith("reused the verdict of")
    assert _imports(counter) == ran

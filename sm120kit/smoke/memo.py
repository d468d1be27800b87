"""Remembered smoke verdicts: a no-op `provision` re-checks state but does not re-smoke.

Smoke imports torch in fresh interpreters, which costs seconds to tens of seconds per host;
nothing it looks at changes unless the installed builds, the env or the checks change. So
`provision` keys each passing verdict by a fingerprint of exactly those (remote/smoke_memo.py):

- per package, the sha256 of the installed distribution's RECORD (the sha256 of every file pip
  installed: another build of the same version differs) and the install record's wheel sha256;
- the sha256 of the env's marker (Python, torch build and its facts, tools);
- the sha256 of the probe and of the code that judges it (a changed check re-smokes);
- the recipe's arch list and the host's GPUs (none, or their compute capabilities).

The verdict is stored on the host under ``<work_root>/state/smoke/<key>.json`` after a smoke
run without failures; a later run with the same key reuses it (one remote command) and says so:
``"smoke": {"reused": true, ...}`` in the JSON, ``"reused": true`` in each package's verdict.
`provision --recheck` always runs the checks (and refreshes the memo); the `smoke` task never
reads it.

`provision --stack`'s ``stack smoke`` (`stack_smoke_or_reuse`) uses the same mechanism
(`look_up`, `remember`) for the serving env: its marker is the env's record of what it holds
by sha256 (`names.STACK_RECORD`), and its context the checks' code, the recipe's declarations,
the stack knowledge the probe is given, the target arch and whether the host has a GPU
(`ops/smoke_check.stack_verdict_context`).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from ..remote import script_bundle
from ..remote.lib.names import ENV_MARKER, STACK_RECORD
from ..runner.pool import HostContext
from ..state import ProvisionState

SCRIPT = "smoke_memo"
#: The code a verdict comes from: the probe that runs on the host and the modules judging it.
_VERDICT_CODE = ("smoke/report.py", "ops/smoke_check.py")


def code_digest() -> str:
    """sha256 over the smoke probe and the modules that judge its output."""
    h = hashlib.sha256(script_bundle("extension_probe").encode())
    root = Path(__file__).resolve().parent.parent
    for rel in _VERDICT_CODE:
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def context(state: ProvisionState) -> dict[str, Any]:
    """What besides the installed files decides a verdict: checks, arch, GPUs."""
    gpu = state.facts.get("gpu") or {}
    gpus = [g.get("compute_cap") for g in gpu.get("gpus") or []] if gpu.get("present") else []
    # The recipe's declarations (torch pin, modules not for the arch by design) change
    # verdicts too, so a recipe edit must not reuse a verdict judged under the old one.
    return {
        "code": code_digest(),
        "arch": state.arch_list,
        "gpus": gpus,
        "declarations": _declarations(state),
    }


def _declarations(state: ProvisionState) -> dict[str, Any]:
    from ..ops import smoke_check  # it imports the runner layer: load on use

    return smoke_check.declarations(state)


def memo_dir(state: ProvisionState) -> str:
    return state.paths.join("state", "smoke")


def look_up(
    ctx: HostContext,
    state: ProvisionState,
    *,
    env: str,
    marker: str,
    packages: list[str],
    context: dict[str, Any],
) -> tuple[str | None, dict[str, Any] | None]:
    """One remote command: the key of a verdict's inputs (the sha256 of `env`'s `marker` file,
    of each package's RECORD and install record, and of `context`), and the verdict remembered
    under it (None: none). The key is None when something is not fingerprintable (no marker,
    a package not installed): such a verdict is never remembered."""
    args = {
        "action": "check",
        "env": env,
        "marker": marker,
        "packages": list(packages),
        "memo_dir": memo_dir(state),
        "context": context,
    }
    found = ctx.script(SCRIPT, args)
    key, memo = found.get("key"), found.get("memo")
    return (str(key) if key else None), (memo if isinstance(memo, dict) else None)


def remember(ctx: HostContext, state: ProvisionState, key: str, doc: dict[str, Any]) -> None:
    """Store a passing verdict under `key` (from `look_up`) on the host."""
    ctx.script(SCRIPT, {"action": "store", "memo_dir": memo_dir(state), "key": key, "doc": doc})


def smoke_or_reuse(
    ctx: HostContext, state: ProvisionState, names: list[str], *, recheck: bool = False
) -> None:
    """`provision`'s smoke step: reuse the remembered verdict when nothing changed, else run it."""
    from ..ops import smoke_check

    if not names:
        return
    env = smoke_check.managed_env_path(state)
    start = time.monotonic()
    key, memo = look_up(
        ctx, state, env=env, marker=ENV_MARKER, packages=names, context=context(state)
    )
    looked_up = time.monotonic() - start  # counted in the smoke step's time below
    if memo and not recheck:
        with ctx.step("smoke") as step:
            verdicts = memo.get("packages") or {}
            for name in names:
                verdict = dict(verdicts.get(name) or {})
                state.packages.setdefault(name, {})["smoke"] = {**verdict, "reused": True}
            ctx.set(
                smoke={
                    "reused": True,
                    "key": key,
                    "checked_at": memo.get("checked_at"),
                    "run_dir": memo.get("run_dir"),
                    "packages": {n: (verdicts.get(n) or {}).get("status") for n in names},
                }
            )
            step.message = (
                f"reused the verdict of {memo.get('checked_at')} ({memo.get('summary')}): "
                "installed builds, env, checks, arch and GPUs unchanged"
            )
        _add_seconds(ctx, looked_up)
        return
    try:
        smoke_check.smoke_packages(ctx, state, names)  # raises on a failed check: nothing stored
    finally:
        _add_seconds(ctx, looked_up)
    doc = ctx.result.data.get("smoke")
    if isinstance(doc, dict):
        doc["reused"] = False
    for name in names:
        fresh = state.packages.get(name, {}).get("smoke")
        if isinstance(fresh, dict):
            fresh["reused"] = False
    if not key:
        return  # something not fingerprintable (no marker or RECORD): never remembered
    last = ctx.result.steps[-1] if ctx.result.steps else None
    remember(
        ctx,
        state,
        key,
        {
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "summary": last.message if last is not None else "",
            "run_dir": str(ctx.runner.run_dir) if ctx.runner.run_dir else None,
            "packages": {
                n: {k: v for k, v in state.packages[n]["smoke"].items() if k != "reused"}
                for n in names
                if isinstance(state.packages.get(n, {}).get("smoke"), dict)
            },
        },
    )


def stack_smoke_or_reuse(ctx: HostContext, state: ProvisionState, env: str, *, fresh: bool) -> None:
    """`provision --stack`'s ``stack smoke``: reuse the serving env's remembered passing verdict
    while nothing it depends on changed, else run it (`ops/smoke_check.smoke_stack`) and
    remember a pass. `fresh` (the stack step changed the env, or ``--recheck``): always run."""
    from ..ops import smoke_check

    context = {**smoke_check.stack_verdict_context(state), "code": code_digest()}
    key, memo = look_up(ctx, state, env=env, marker=STACK_RECORD, packages=[], context=context)
    passed = smoke_check.smoke_stack(ctx, state, env, memo=None if fresh else memo)
    if passed is not None and key:
        remember(ctx, state, key, passed)


def _add_seconds(ctx: HostContext, seconds: float) -> None:
    """The memo lookup belongs to the smoke step's time (it runs before the step opens)."""
    if ctx.result.steps and ctx.result.steps[-1].name == "smoke":
        ctx.result.steps[-1].seconds += seconds

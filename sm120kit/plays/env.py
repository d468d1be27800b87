"""Toolkit then the managed env, as one task (`sm120kit/ops/toolkit.py`, `sm120kit/ops/pyenv.py`)."""

from __future__ import annotations

from dataclasses import replace

from ..ops.pyenv import ensure_env
from ..ops.toolkit import ensure_toolkit
from ..runner.pool import HostContext, HostOp
from .plan import PlanOptions, prepare


def env_op(opts: PlanOptions) -> HostOp:
    """Toolkit then env, as one task (for an `invoke env` task and for tests)."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        state.flags = replace(state.flags, builds=False)
        toolkit = ensure_toolkit(ctx, state)
        env = ensure_env(ctx, state, opts.packages)
        ctx.set(toolkit=toolkit.to_dict(), env=env.to_dict(), notes=state.resolved.notes)

    return run

"""`invoke install-cuda`: the recipe's toolkit on each host (`sm120kit/ops/toolkit.py`)."""

from __future__ import annotations

from dataclasses import replace

from ..ops.toolkit import ensure_toolkit
from ..runner.pool import HostContext, HostOp
from .plan import PlanOptions, prepare


def install_cuda_op(opts: PlanOptions) -> HostOp:
    """`invoke install-cuda`: the recipe's toolkit side by side, verified."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        state.flags = replace(state.flags, builds=False)
        try:
            toolkit = ensure_toolkit(ctx, state)
        finally:
            ctx.set(notes=state.resolved.notes)
        ctx.set(toolkit=toolkit.to_dict())

    return run

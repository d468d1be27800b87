"""`invoke plan` and `invoke provision`: the toolkit, the env, each package, then the smoke
check, in that order on every host (plan runs the same steps in check mode)."""

from __future__ import annotations

from .ops.build import ensure_package
from .ops.pyenv import ensure_env
from .ops.toolkit import ensure_toolkit
from .plan import PlanOptions, package_names, prepare
from .runner import HostContext, HostOp
from .smoke_memo import smoke_or_reuse


def plan_or_provision_op(opts: PlanOptions) -> HostOp:
    """`invoke plan` (check mode) and `invoke provision`: the same steps, in order."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        ctx.set(values=[list(r) for r in state.resolved.rows()], notes=state.resolved.notes)
        ensure_toolkit(ctx, state)
        ensure_env(ctx, state)
        names = package_names(state, opts)
        for name in names:
            ensure_package(ctx, state, name)
        if not ctx.check_mode:
            smoke_or_reuse(ctx, state, names, recheck=opts.flags.recheck)
        ctx.set(
            toolkit=state.toolkit.to_dict() if state.toolkit else None,
            env=state.env.to_dict() if state.env else None,
            packages=state.packages,
        )

    return run

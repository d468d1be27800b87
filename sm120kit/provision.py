"""`invoke plan` and `invoke provision`: the toolkit, the env, each package, the serving
stack, then the smoke check, in that order on every host (plan runs the same steps in check
mode).

With the stack requested (``--stack`` or host var ``provision_stack: true``; sm120kit/stack.py)
the run installs the recipe's lock into its serving env instead of building the recipe's
packages (``provision_packages`` still names any to build); the build env is made only when
something is built. Plan always shows the stack of a recipe that has one; provision
without the stack requested leaves it alone (choosing its parts reads wheels).
"""

from __future__ import annotations

from .ops.build import ensure_package
from .ops.host_python import ensure_python
from .ops.pyenv import ensure_env
from .ops.smoke_check import smoke_stack
from .ops.toolkit import ensure_toolkit
from .plan import PlanOptions, package_names, prepare
from .runner import HostContext, HostOp
from .smoke_memo import smoke_or_reuse
from .stack import stack_requested


def plan_or_provision_op(opts: PlanOptions) -> HostOp:
    """`invoke plan` (check mode) and `invoke provision`: the same steps, in order."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        ctx.set(values=[list(r) for r in state.resolved.rows()], notes=state.resolved.notes)
        stack = stack_requested(ctx.host.vars, opts.flags.stack)
        # Which Python (and stack lock) the env and the stack use: first, so a host that
        # has none it can get stops before the toolkit's download.
        with_stack = state.resolved.recipe.stack is not None and (stack or ctx.check_mode)
        ensure_python(ctx, state, stack=with_stack)
        ensure_toolkit(ctx, state)
        names = (
            package_names(state, opts)
            if not stack or ctx.host.vars.get("provision_packages")
            else []
        )
        if names or not stack:
            ensure_env(ctx, state)
        for name in names:
            ensure_package(ctx, state, name)
        # Without --stack, provision leaves the stack alone: choosing its parts reads the
        # controller's copies of released wheels (seconds per wheel), which only plan shows.
        if state.resolved.recipe.stack is not None and (stack or ctx.check_mode):
            from .ops.stack import ensure_stack

            doc = ensure_stack(ctx, state, install=stack)
            if stack and not ctx.check_mode:
                step = next(s for s in reversed(ctx.result.steps) if s.name == "stack")
                fresh = step.status == "changed" or opts.flags.recheck
                smoke_stack(ctx, state, str(doc["env"]), fresh=fresh)
        if not ctx.check_mode:
            smoke_or_reuse(ctx, state, names, recheck=opts.flags.recheck)
        ctx.set(
            toolkit=state.toolkit.to_dict() if state.toolkit else None,
            env=state.env.to_dict() if state.env else None,
            packages=state.packages,
        )

    return run

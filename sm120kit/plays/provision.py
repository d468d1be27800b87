"""`invoke plan` and `invoke provision`: the toolkit, the env, each package, the serving
stack, then the smoke check, in that order on every host (plan runs the same steps in check
mode).

A host's provision is its recipe's serving stack, release-first, by default; builds run only
for the lock entries the stack marks build (the stack step's) and for the packages the user
names (``--package``, host var ``provision_packages``). `sm120kit.stack.choice.provision_parts`
decides both, with its reasons (``--no-stack`` / ``provision_stack: false`` turn the stack
off, ``--stack`` forces it); the build env is made only when something is built or the
stack is off.
"""

from __future__ import annotations

from ..errors import HostFailed, RecipeError
from ..ops.pyenv import ensure_env
from ..ops.python import ensure_python
from ..ops.stack_files import fill_stores, filling_stores, leave_peers
from ..ops.toolkit import ensure_toolkit
from ..runner.pool import HostContext, HostOp
from ..stack.choice import provision_parts, stack_build_names
from .build import ensure_package
from .plan import PlanOptions, package_names, prepare
from .smoke_memo import smoke_or_reuse, stack_smoke_or_reuse
from .stack import ensure_stack


def plan_or_provision_op(opts: PlanOptions) -> HostOp:
    """`invoke plan` (check mode) and `invoke provision`: the same steps, in order."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        ctx.set(values=[list(r) for r in state.resolved.rows()], notes=state.resolved.notes)
        try:
            parts = provision_parts(
                recipe=state.resolved.recipe.name,
                has_stack=state.resolved.recipe.stack is not None,
                host_vars=ctx.host.vars,
                stack_flag=opts.flags.stack,
                no_stack_flag=opts.flags.no_stack,
                packages=opts.packages,
            )
        except RecipeError as exc:
            raise HostFailed(f"{ctx.host.name}: {exc}") from None
        state.wanted = list(parts.builds)  # the toolkit's library needs follow the builds
        state.stack_builds = stack_build_names(state.resolved) if parts.stack else []
        with ctx.step("parts") as step:
            step.message = (
                f"stack: {'yes' if parts.stack else 'no'} ({parts.stack_why}); builds: "
                f"{', '.join(parts.builds) or 'none'} ({parts.builds_why})"
            )
        ctx.set(parts=parts.to_dict())
        # Which Python (and stack lock) the env and the stack use: before the toolkit, so a
        # host that has none it can get stops before the toolkit's download.
        with_stack = state.resolved.recipe.stack is not None and parts.stack
        ensure_python(ctx, state, stack=with_stack)
        ensure_toolkit(ctx, state)
        names = package_names(state, opts)
        if names or not parts.stack:
            ensure_env(ctx, state)
        for name in names:
            ensure_package(ctx, state, name)
        try:
            if parts.stack:
                stack = ensure_stack(ctx, state, install=True, recheck=opts.flags.recheck)
                if not ctx.check_mode:
                    fresh = stack.changed or opts.flags.recheck
                    # The stores' copies of what this host downloaded, beside its smoke.
                    with filling_stores(ctx):
                        stack_smoke_or_reuse(ctx, state, str(stack.doc["env"]), fresh=fresh)
            if not ctx.check_mode:
                smoke_or_reuse(ctx, state, names, recheck=opts.flags.recheck)
        finally:
            if parts.stack and not ctx.check_mode:
                fill_stores(ctx)  # what a failed step left deferred (nothing, usually)
                leave_peers(ctx)
        ctx.set(
            toolkit=state.toolkit.to_dict() if state.toolkit else None,
            env=state.env.to_dict() if state.env else None,
            packages=state.packages,
        )

    return run

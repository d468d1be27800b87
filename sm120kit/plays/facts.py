"""`invoke facts`: the host's facts (`sm120kit.facts.gather`), recorded as its result."""

from __future__ import annotations

from ..facts import gather
from ..runner.pool import HostContext


def facts_op(ctx: HostContext) -> None:
    """`invoke facts`: gather and record the facts."""
    ctx.set(facts=gather(ctx))

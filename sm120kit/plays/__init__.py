"""The composition layer: each task's flow (facts, plan, provision, build, stack, smoke,
preflight, serve-check, ...) runs the leaf operations of `sm120kit/ops/` in order.

Plays may import ops and each other; ops never import plays (tests/rules/test_layers.py).
"""

"""Provisioning operations: leaves, one module per thing they ensure on a host.

Each is ``ensure_x(ctx, state, ...)`` returning what it ensured; none imports another module of
this package (tests/rules/test_layers.py). What runs them in order is `sm120kit/plays/`.
"""

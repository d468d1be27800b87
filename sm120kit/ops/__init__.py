"""Provisioning operations, one module per thing they ensure on a host.

`toolkit` (CUDA toolkit), `pyenv` (the managed Python environment), `build` (kernel packages
through the wheel cache) and `smoke` (checks of what was built). Each takes ``(ctx, state)``;
submodules load on first use (``ops.build``), so importing one does not import the others.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    if name.startswith("__"):
        raise AttributeError(name)
    return import_module(f"{__name__}.{name}")

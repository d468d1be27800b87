"""multikernel: eight nvcc-compiled units behind one extension (the compile-cache sample)."""

from ._C import units

__all__ = ["units"]

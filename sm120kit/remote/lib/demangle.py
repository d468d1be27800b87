"""C++ symbol names, demangled by libstdc++'s ``__cxa_demangle`` through ctypes.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import ctypes
from typing import Any


class Demangler:
    """``__cxa_demangle`` from libstdc++ through ctypes; returns the raw name when unavailable."""

    def __init__(self) -> None:
        self._fn: Any = None
        self._free: Any = None
        try:
            lib = ctypes.CDLL("libstdc++.so.6")
            fn = getattr(lib, "__cxa_demangle")  # getattr: a class body would mangle __names
            fn.restype = ctypes.c_void_p
            fn.argtypes = [
                ctypes.c_char_p,
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_int),
            ]
            libc = ctypes.CDLL(None)
            libc.free.argtypes = [ctypes.c_void_p]
            self._fn, self._free = fn, libc.free
        except (OSError, AttributeError):
            pass

    def __call__(self, name: str) -> str:
        if self._fn is None or not name.startswith("_Z"):
            return name
        status = ctypes.c_int(0)
        ptr = self._fn(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return name
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            self._free(ptr)

"""Derivations computed once per controller process, also when many host threads ask at once.

`functools.cache` computes a missing value in every thread that asks for it before the first
has stored it: a provision of N hosts starts N host threads at the same moment, and each of
them parsed the remote library's modules for the same script bundle, the same locks for the
same catalogue facts (docs/benchmarks.md "Fleet data plane, 2026-12-08": most of the
controller's CPU per extra host was these repeats). `once` keeps one lock per argument
tuple: the first caller computes, the others wait for its value (or its exception, raised
again in each of them, not stored: the next call tries again).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


def once(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` memoized by its (hashable) positional and keyword arguments, computed at most
    once at a time per arguments; the values are shared: callers must not change them."""
    values: dict[Hashable, T] = {}
    locks: dict[Hashable, threading.Lock] = {}
    guard = threading.Lock()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        key: Hashable = (args, tuple(sorted(kwargs.items())))
        try:
            return values[key]
        except KeyError:
            pass
        with guard:
            lock = locks.setdefault(key, threading.Lock())
        with lock:
            if key in values:
                return values[key]
            value = fn(*args, **kwargs)
            values[key] = value
            return value

    def cache_clear() -> None:
        with guard:
            values.clear()
            locks.clear()

    wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
    return wrapper


class Same:
    """Objects compared by identity (and kept alive, so no other object takes their id): a
    memo key for "these very registrations", where the objects themselves are not hashable
    or compare by value."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[Any, ...]) -> None:
        self.items = items

    def __hash__(self) -> int:
        return hash(tuple(id(x) for x in self.items))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Same)
            and len(other.items) == len(self.items)
            and all(a is b for a, b in zip(self.items, other.items, strict=True))
        )


__all__ = ["Same", "once"]

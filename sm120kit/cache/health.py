"""Which stores answer: a store that could not be reached is skipped for a back-off.

A store is skipped only while it is unreachable (``store.unreachable``: connection, timeout,
credentials), for a back-off that doubles per failure up to :data:`MAX_DOWN_BACKOFF`; any
other lookup error is a miss for that look and says nothing about the store.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .config import CacheConfig

#: Longest back-off (s) before a store that could not be reached is asked again.
MAX_DOWN_BACKOFF = 60.0


@dataclass
class Down:
    """A store that could not be reached: skipped until ``until`` (monotonic), then asked again."""

    reason: str
    until: float
    failures: int


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def add_event(events: list[str], event: str) -> None:
    """Record an event once per lookup: a waiter that polls must not repeat the same line."""
    if event not in events:
        events.append(event)


class StoreHealth:
    """The down marks of one run's stores, shared by every host thread."""

    def __init__(self, config: CacheConfig) -> None:
        #: Its poll_interval is the first back-off (s); it doubles with each failure in a row.
        self.config = config
        self._lock = threading.Lock()
        self._down: dict[str, Down] = {}

    def is_down(self, name: str) -> Down | None:
        """The down mark of a store while its back-off lasts, else None."""
        with self._lock:
            down = self._down.get(name)
        return down if down is not None and time.monotonic() < down.until else None

    def mark_down(self, name: str, exc: BaseException, events: list[str]) -> None:
        """A store could not be reached: skip it for a back-off that doubles per failure."""
        reason = one_line(exc)
        with self._lock:
            prev = self._down.get(name)
            failures = (prev.failures if prev else 0) + 1
            backoff = min(MAX_DOWN_BACKOFF, self.config.poll_interval * 2 ** (failures - 1))
            self._down[name] = Down(reason, time.monotonic() + backoff, failures)
        add_event(
            events, f"store {name} unreachable ({reason}); skipped, asked again in {backoff:.1f}s"
        )

    def mark_up(self, name: str, events: list[str]) -> None:
        """A store answered: ask it again from now on (and say so if it was down)."""
        with self._lock:
            prev = self._down.pop(name, None)
        if prev is not None:
            add_event(events, f"store {name} reachable again")

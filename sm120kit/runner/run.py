"""What the host threads of one run share: settings and run-wide services, in one typed object.

The model is pyinfra's State: one object per run that every host's work can reach
(``ctx.runner.shared``), instead of attributes hung on the runner by whoever needs them. It
holds the task layer's settings (invoke.yaml's ``sm120kit`` section), the run's wheel cache
(created on first use by :func:`sm120kit.cache.wheels.cache_for`) and the values the build
operation computes once per run (packed source trees, the source index), whichever host
thread asks first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cache.wheels import WheelCache
    from ..inventory.host import Host


@dataclass
class Run:
    """Run-wide state of one Runner; safe to use from every host thread at once."""

    #: The task layer's settings (invoke.yaml), for run-wide services like the wheel cache.
    settings: dict[str, Any] = field(default_factory=dict)
    #: The wheel cache of this run, once a build asked for it.
    wheel_cache: WheelCache | None = None
    #: Every host of the inventory, by name (not only the run's): an earlier run's host that
    #: holds released files serves them to this run's hosts (cache/holders.py).
    inventory: dict[str, Host] = field(default_factory=dict)
    #: Guards the creation of run-wide services (the wheel cache).
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _values: dict[str, tuple[str, Any]] = field(default_factory=dict, repr=False)
    _values_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per run and key, whichever host thread asks first.

        An error is kept too: every host asking for the key gets the same exception.
        """
        with self._values_lock:
            if key not in self._values:
                try:
                    self._values[key] = ("ok", compute())
                except Exception as exc:  # every host asking gets the same one-line error
                    self._values[key] = ("error", exc)
            status, value = self._values[key]
        if status == "error":
            raise value
        return value

"""The values the wheel cache's parts hand each other: a request, its sources, its outcome."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .context import CacheHost
from .key import KeyInputs
from .store import Store

if TYPE_CHECKING:
    from .publish import DeferredPut


@dataclass
class BuiltWheel:
    """What a build closure returns: the wheel's path ON THE HOST and how it came about."""

    path: str
    sha256: str
    seconds: float
    log: str


@dataclass
class Obtained:
    """A wheel ready on the host (``path`` is "" in check mode) and where it came from."""

    path: str
    sha256: str
    wheel_from: str
    key: str
    #: One-line cache events of this lookup (quarantines, unavailable stores, waits).
    events: list[str] = field(default_factory=list)
    #: Wheel bytes sent between controller and host for this wheel (both directions).
    bytes_moved: int = 0
    #: After a build: the controller/shared stores the wheel was put into.
    stored_in: list[str] = field(default_factory=list)


@dataclass
class Source:
    """One store a host reads, under the name ``wheel_from`` gives it."""

    name: str
    store: Store
    host_root: str | None = None  # set for the host store: its root as a host path


@dataclass
class WheelRequest:
    """One host's ask for one key's wheel, as it travels through lookup, election, lock and
    publish: the host, the key and its inputs, how to build, where the wheel goes, the stores
    to read (in order), and the cache events recorded on the way."""

    ctx: CacheHost
    inputs: KeyInputs
    key: str
    build: Callable[[], BuiltWheel]
    dest_dir: str
    sources: list[Source]
    rebuild: bool = False  # stored wheels of the key are not taken until this run built one
    #: Any host may produce it (a download, not a build): the ``build_host`` var does not apply.
    any_host: bool = False
    events: list[str] = field(default_factory=list)
    #: With a download (`any_host`): where its puts into the controller and shared stores go
    #: instead of being made at once (each a call made later, off the host's critical path,
    #: `WheelCache.fill`). None: published at once.
    later: list[DeferredPut] | None = None
    #: With a download: how the host takes a store's wheel by itself from a URL the store
    #: gives (`Store.download_url`: a presigned S3 URL), ``direct(url, filename, sha256)``,
    #: True once it is in `dest_dir` with that sha256. None, or False: relayed as before.
    direct: Callable[[str, str, str], bool] | None = None

    @property
    def work(self) -> str:
        """What producing the wheel is, for messages: "build", or "download" for a release."""
        return "download" if self.any_host else "build"

    @property
    def what(self) -> str:
        """The package and short key, for messages."""
        return f"{self.inputs.package} (key {self.key[:12]})"

    def progress(self, detail: str) -> None:
        """Show what this host's wheel is waiting for or doing. Not for a released file: it is
        one of a lock's hundreds fetched at once, and the step that asked for them shows their
        sum (files, bytes, rate, ETA) on the host's row, which one file's word would hide."""
        if self.any_host:
            return
        self.ctx.runner.progress.step(self.ctx.host.name, f"wheel {self.inputs.package}", detail)


class Counters:
    """Run-wide counters (builds, hits:<store>, bytes_to_hosts, bytes_from_hosts, quarantined)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.values[name] = self.values.get(name, 0) + n

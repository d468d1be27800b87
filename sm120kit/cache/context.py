"""What the wheel cache needs from a host's context: a typed protocol instead of ``Any``.

The run API's ``HostContext`` satisfies it, and so does any stand-in with the same members
(a check-mode view, a test double): the cache reads the host and its vars, logs, runs
commands and remote scripts and moves files over the host's connection, shows progress, and
records events in the host's result.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..inventory.host import Host
from ..output.progress import Progress
from ..paths import HostPaths
from ..runner.connection import CommandResult
from ..runner.results import HostResult


class RunView(Protocol):
    """The part of a Runner the cache uses: its progress display and the run's hosts."""

    @property
    def progress(self) -> Progress: ...

    @property
    def host_names(self) -> frozenset[str]: ...


class StateView(Protocol):
    """The part of a host's provision state the cache uses: where its host store lives."""

    @property
    def paths(self) -> HostPaths: ...


class CacheHost(Protocol):
    """A host's context as the wheel cache sees it (``sm120kit.runner.host_context.HostContext``)."""

    @property
    def host(self) -> Host: ...

    @property
    def log(self) -> logging.Logger: ...

    @property
    def check_mode(self) -> bool: ...

    def put(self, local: str | os.PathLike[str], remote: str) -> None: ...

    def get(self, remote: str, local: str | os.PathLike[str]) -> None: ...

    def sftp_lease(self) -> Callable[[], AbstractContextManager[Any]] | None: ...

    @property
    def result(self) -> HostResult: ...

    @property
    def runner(self) -> RunView: ...

    @property
    def state(self) -> StateView | None: ...

    def run(
        self,
        command: str,
        *,
        check: bool = True,
        stdin: str | None = None,
        timeout: float | None = None,
        what: str | None = None,
    ) -> CommandResult: ...

    def script(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        python: str | None = None,
        timeout: float | None = None,
        path: list[str] | None = None,
    ) -> dict[str, Any]: ...

"""The one way a host op runs anything on its host: `HostContext`.

Every command, remote script and file copy goes through here, so each is written to the
host's log and counted (the connection counts; `connection.uncounted` leaves bookkeeping out),
the environment is scrubbed the same way (the connection's wrapper) and a PATH prefix is put
in front on the host, where its value is known. The connection itself is private to this
module: nothing else in sm120kit reaches it (tests/rules/test_run_api.py checks that).
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import HostFailed, Interrupted, one_line
from ..inventory.host import Host
from ..remote import run_script
from ..remote.lib.download import redact_text
from .connection import CommandResult, Connection, SSHConnection, connect
from .process import start
from .results import HostResult, StepResult
from .service import Service, service_command

if TYPE_CHECKING:
    import logging

    from ..state import ProvisionState
    from .pool import Runner


#: The most characters of one script's arguments or one request a log line keeps.
LOGGED_MAX = 4000


def _logged(text: str) -> str:
    """`text` for the host log: credentials masked first, then cut (a cut made first could
    split ``user:pass@`` so that the mask no longer sees it)."""
    return redact_text(text)[:LOGGED_MAX]


class SkipHost(Exception):
    """Raised by a host op to mark its host skipped (with a reason)."""


class HostContext:
    """What a host op sees of its host: steps, commands, scripts, files, results."""

    def __init__(self, host: Host, runner: Runner, result: HostResult, log: logging.Logger):
        self.host = host
        self.runner = runner
        self.result = result
        self.log = log
        self.facts: dict[str, Any] | None = None
        #: The interpreter the default ``python3`` turned out to be (`facts.gather`), which
        #: later scripts start directly: a wrapper in front of it (pyenv's shim, a bash
        #: script) costs more per start than many a script's own work.
        self.script_python: str | None = None
        #: This host's facts and resolved recipe, once ``plan.prepare`` made them.
        self.state: ProvisionState | None = None
        self._conn: Connection | None = None
        # Guards the first open: an op may run commands from several threads.
        self._opening = threading.Lock()
        #: Set while `probing()`: the ops only probe although the run may change the host.
        self._probing = False
        self._services: dict[str, Service] = {}
        self._services_lock = threading.Lock()

    @property
    def check_mode(self) -> bool:
        """Only probe, never change the host: the run is in check mode, or `probing()`."""
        return self._probing or self.runner.options.check_mode

    @contextmanager
    def probing(self) -> Iterator[None]:
        """Within the block the ops only probe (check mode for this host op alone): what
        ``cache.key`` uses to learn the toolkit and env a build would get, changing nothing."""
        before, self._probing = self._probing, True
        try:
            yield
        finally:
            self._probing = before

    def _connection(self) -> Connection:
        """The host's connection, opened (with bounded retries) on first use."""
        with self._opening:
            if self._conn is None:
                conn = connect(self.host, self.runner.options.connect)
                if isinstance(conn, SSHConnection):
                    conn.sessions.note = self.log.warning
                self.log.info("connecting to %s", self.host.display())
                conn.open()
                self._conn = conn
            return self._conn

    @property
    def commands_run(self) -> int:
        return self._conn.commands_run if self._conn is not None else 0

    @contextmanager
    def step(self, name: str) -> Iterator[StepResult]:
        """Record a step; the block sets `.status = "changed"` when it changed the host."""
        step = StepResult(name)
        self.result.steps.append(step)
        self.runner.progress.step(self.host.name, name)
        self.log.info("step %s", name)
        start = time.monotonic()
        try:
            yield step
        except SkipHost as exc:
            step.status, step.message = "skipped", str(exc)
            raise
        except Interrupted as exc:
            step.status, step.message = "interrupted", f"interrupted ({exc})"
            raise
        except BaseException as exc:
            step.status = "failed"
            step.message = one_line(str(exc)) or type(exc).__name__
            raise
        finally:
            step.seconds = time.monotonic() - start
            self.log.info("step %s: %s %s", name, step.status, step.message)

    def run(
        self,
        command: str,
        *,
        check: bool = True,
        stdin: str | None = None,
        timeout: float | None = None,
        what: str | None = None,
        quiet: bool = False,
    ) -> CommandResult:
        """Run a shell command on the host; a non-zero exit raises HostFailed when `check`.

        `stdin` is never logged (it may carry credentials). `quiet`: nothing is logged (a poll
        that runs every few seconds for hours); the command still counts."""
        if not quiet:
            self.log.info("$ %s", command)
        res = self._connection().run(command, stdin=stdin, timeout=timeout)
        if not quiet:
            self.log.info("exit %d", res.exit_code)
            if res.stdout.strip():
                self.log.info("stdout:\n%s", res.stdout.rstrip()[-20000:])
            if res.stderr.strip():
                self.log.info("stderr:\n%s", res.stderr.rstrip()[-20000:])
        if check and not res.ok:
            tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [""]
            raise HostFailed(f"{what or command!r} failed (exit {res.exit_code}): {tail[0]}")
        return res

    def read_text(self, path: str, *, timeout: float | None = None, quiet: bool = False) -> str:
        """A host file's text, "" when it is missing or unreadable."""
        return self.run(
            f"cat {_q(path)} 2>/dev/null || true", check=False, timeout=timeout, quiet=quiet
        ).stdout

    def read_json(self, path: str) -> dict[str, Any] | None:
        """A host file's JSON object, or None when it is missing or not one."""
        text = self.read_text(path)
        try:
            value = json.loads(text) if text.strip() else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def script(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        python: str | None = None,
        timeout: float | None = None,
        path: list[str] | None = None,
    ) -> dict[str, Any]:
        """Run a stdlib-only remote script (sm120kit/remote/<name>.py) and return its JSON;
        `path`: directories put in front of the host's PATH for it."""
        self.log.info("remote script %s %s", name, _logged(json.dumps(args or {}, sort_keys=True)))
        if path:
            self.log.info("PATH prefix %s", ":".join(path))
        python = python or self.script_python
        doc = run_script(self._connection(), name, args, python=python, timeout=timeout, path=path)
        self.log.info("-> %s", json.dumps(doc, sort_keys=True)[:20000])
        return doc

    def ask(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        """`request`'s reply from remote script `name` kept running as a service
        (`runner.service`): started on first use (again if it has ended), shared by every
        thread of this host's op, closed with this context."""
        with self._services_lock:
            service = self._services.get(name)
            if service is None or service.ended:
                python = self.script_python or self.host.python
                self.log.info("remote service %s started", name)
                proc = start(self._connection(), service_command(python, name))
                service = self._services[name] = Service(name, proc)
        self.log.info("ask %s %s", name, _logged(json.dumps(request, sort_keys=True)))
        reply = service.ask(request)
        self.log.info("-> %s", _logged(json.dumps(reply, sort_keys=True)))
        return reply

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        """Copy a controller file to the host (logged like a command)."""
        self.log.info("put %s -> %s", local, remote)
        self._connection().put(local, remote)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Copy a host file to the controller (logged like a command)."""
        self.log.info("get %s -> %s", remote, local)
        self._connection().get(remote, local)

    def sftp_lease(self) -> Callable[[], AbstractContextManager[Any]] | None:
        """What lends an SFTP session of the host's connection to a thread for a block (the
        wheel cache's host store); None on a local host, whose files are this machine's."""
        conn = self._connection()
        return conn.sftp_session if isinstance(conn, SSHConnection) else None

    def keep_process_groups_in(self, directory: str) -> None:
        """From now on each command leaves its process group id in `directory` on the host
        (the host lock's), so a later run can kill what this one left behind."""
        self._connection().pgid_dir = directory

    def may_act(self, step: StepResult, message: str, commands: list[str] | None = None) -> bool:
        """May the operation act now? Marks `step` changed; in check mode records what would run
        (`commands`, the rendered steps) and answers False.

        Operations ask once they know a change is needed, before touching the host:
        `if ctx.may_act(step, "install CUDA 13.0.2", cmds): <do it>`.
        """
        if self._probing:
            # Probing for another task (cache.key): the step would change, this run does not.
            step.message, step.commands = f"would {message}", list(commands or [])
            return False
        step.status = "changed"
        if self.check_mode:
            step.message = f"would {message}"
            step.commands = list(commands or [])
            return False
        step.message = message
        return True

    def set(self, **fields: Any) -> None:
        """Record result fields for this host's JSON result."""
        self.result.data.update(fields)

    def skip(self, reason: str) -> None:
        raise SkipHost(reason)

    def close(self) -> None:
        with self._services_lock:
            services, self._services = list(self._services.values()), {}
        for service in services:
            service.close()
        if self._conn is not None:
            self._conn.close()


def _q(text: str) -> str:
    return shlex.quote(text)


__all__ = ["HostContext", "SkipHost"]

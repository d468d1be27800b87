"""Run one task on many hosts at once: bounded forks, isolated failures, live progress, recap.

A task is a function `fn(ctx: HostContext) -> None` run once per host in a thread pool. It
groups its work in `with ctx.step("name") as step:` blocks (a step is "ok" unless the code
marks it "changed"), runs commands and remote scripts through the context, and records task
fields with `ctx.set(...)`. Whatever it raises is confined to its host: HostUnreachable makes
the host "unreachable", any other error "failed"; the other hosts go on.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import secrets
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .connection import CommandResult, Connection, ConnectOptions, connect
from .errors import HostFailed, HostUnreachable, LockHeld, Sm120Error
from .host import Host
from .progress import NullProgress, Progress
from .remote import run_script
from .results import HostResult, RunResult, StepResult


class SkipHost(Exception):
    """Raised by a task to mark its host skipped (with a reason)."""


@dataclass
class RunOptions:
    """How a run behaves, independent of what it does."""

    forks: int = 16
    check_mode: bool = False
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    run_root: str = "~/.cache/sm120kit/runs"
    lock_stale_after: float = 6 * 3600
    break_lock: bool = False


def _redactor(secrets_: list[str]) -> logging.Filter:
    class Redact(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            message = record.getMessage()
            for secret in secrets_:
                if secret:
                    message = message.replace(secret, "********")
            record.msg, record.args = message, None
            return True

    return Redact()


class HostContext:
    """What a task function sees of its host: connection, steps, commands, results."""

    def __init__(self, host: Host, runner: Runner, result: HostResult, log: logging.Logger):
        self.host = host
        self.runner = runner
        self.result = result
        self.log = log
        self.facts: dict[str, Any] | None = None
        self._conn: Connection | None = None

    @property
    def check_mode(self) -> bool:
        return self.runner.options.check_mode

    @property
    def conn(self) -> Connection:
        """The host's connection, opened (with bounded retries) on first use."""
        if self._conn is None:
            conn = connect(self.host, self.runner.options.connect)
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
        except BaseException as exc:
            step.status = "failed"
            step.message = str(exc) or type(exc).__name__
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
    ) -> CommandResult:
        """Run a shell command on the host; a non-zero exit raises HostFailed when `check`."""
        self.log.info("$ %s", command)
        res = self.conn.run(command, stdin=stdin, timeout=timeout)
        self.log.info("exit %d", res.exit_code)
        if res.stdout.strip():
            self.log.info("stdout:\n%s", res.stdout.rstrip()[-20000:])
        if res.stderr.strip():
            self.log.info("stderr:\n%s", res.stderr.rstrip()[-20000:])
        if check and not res.ok:
            tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [""]
            raise HostFailed(f"{what or command!r} failed (exit {res.exit_code}): {tail[0]}")
        return res

    def script(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        python: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run a stdlib-only remote script (sm120kit/remote/<name>.py) and return its JSON."""
        self.log.info("remote script %s %s", name, json.dumps(args or {}, sort_keys=True)[:4000])
        doc = run_script(self.conn, name, args, python=python, timeout=timeout)
        self.log.info("-> %s", json.dumps(doc, sort_keys=True)[:20000])
        return doc

    def changed(self, step: StepResult, message: str, commands: list[str] | None = None) -> bool:
        """Mark `step` changed; in check mode record what would run and return False.

        Operations call this once they know a change is needed:
        `if ctx.changed(step, "install CUDA 13.0.2", cmds): <do it>`.
        """
        step.status = "changed"
        if self.check_mode:
            step.message = f"would {message}"
            step.commands = list(commands or [])
            return False
        step.message = message
        return True

    def set(self, **fields: Any) -> None:
        """Record task fields for this host's JSON result."""
        self.result.data.update(fields)

    def skip(self, reason: str) -> None:
        raise SkipHost(reason)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class Runner:
    """Runs task functions over hosts; owns the run directory and the progress display."""

    def __init__(self, options: RunOptions, progress: Progress | None = None) -> None:
        self.options = options
        self.progress = progress or NullProgress()
        self.run_dir: Path | None = None
        #: The task layer's settings (invoke.yaml), for run-wide services like the wheel cache.
        self.settings: dict[str, Any] = {}

    def _make_run_dir(self, task: str) -> Path:
        root = Path(os.path.expanduser(self.options.run_root))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = root / f"{stamp}-{task.replace('.', '-')}-{secrets.token_hex(3)}"
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir

    def _logger(self, run_dir: Path, host: str) -> logging.Logger:
        log = logging.getLogger(f"sm120kit.run.{run_dir.name}.{host}")
        log.propagate = False
        log.setLevel(logging.INFO)
        handler = logging.FileHandler(run_dir / f"{host}.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        handler.addFilter(
            _redactor(
                [self.options.connect.ssh_password or "", self.options.connect.sudo_password or ""]
            )
        )
        log.addHandler(handler)
        return log

    def run(
        self,
        task: str,
        hosts: list[Host],
        fn: Callable[[HostContext], None],
        *,
        lock: bool = False,
    ) -> RunResult:
        """Run `fn` on every host, at most `forks` at once, and return the results."""
        run_dir = self._make_run_dir(task)
        self.run_dir = run_dir
        results = {h.name: HostResult(h.name) for h in hosts}
        self.progress.start(task, [h.name for h in hosts], str(run_dir))
        try:
            forks = max(1, min(self.options.forks, len(hosts) or 1))
            with ThreadPoolExecutor(max_workers=forks, thread_name_prefix="host") as pool:
                futures = [
                    pool.submit(self._one, task, h, fn, results[h.name], run_dir, lock)
                    for h in hosts
                ]
                for future in futures:
                    future.result()
        finally:
            self.progress.stop()
        result = RunResult(task, results, str(run_dir), self.options.check_mode)
        (run_dir / "result.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
        return result

    def _one(
        self,
        task: str,
        host: Host,
        fn: Callable[[HostContext], None],
        result: HostResult,
        run_dir: Path,
        lock: bool,
    ) -> None:
        log = self._logger(run_dir, host.name)
        result.log = str(run_dir / f"{host.name}.log")
        ctx = HostContext(host, self, result, log)
        self.progress.host_started(host.name)
        start = time.monotonic()
        token = secrets.token_hex(8)
        locked = False
        try:
            if lock and not self.options.check_mode:
                self._acquire(ctx, task, token)
                locked = True
            fn(ctx)
            result.finish()
        except SkipHost as exc:
            result.status, result.error = "skipped", str(exc)
        except HostUnreachable as exc:
            result.status, result.error = "unreachable", str(exc)
        except Sm120Error as exc:
            result.status, result.error = "failed", str(exc)
        except (
            Exception
        ) as exc:  # an unexpected error stays on its host, with a traceback in the log
            result.status = "failed"
            result.error = f"internal error: {type(exc).__name__}: {exc}"
            log.error("%s", traceback.format_exc())
        finally:
            if locked:
                try:
                    ctx.script(
                        "host_lock",
                        {"work_root": host.work_root, "action": "release", "token": token},
                    )
                except Sm120Error as exc:
                    log.warning("could not release the host lock: %s", exc)
            result.seconds = time.monotonic() - start
            result.data.setdefault("commands", ctx.commands_run)
            if result.error:
                log.info("host %s: %s", result.status, result.error)
            ctx.close()
            for handler in list(log.handlers):
                handler.close()
                log.removeHandler(handler)
            self.progress.host_done(host.name, result)

    def _acquire(self, ctx: HostContext, task: str, token: str) -> None:
        owner = {
            "controller": socket.gethostname(),
            "user": getpass.getuser(),
            "pid": os.getpid(),
            "task": task,
            "run_dir": str(self.run_dir),
        }
        with ctx.step("lock") as step:
            doc = ctx.script(
                "host_lock",
                {
                    "work_root": ctx.host.work_root,
                    "action": "acquire",
                    "owner": owner,
                    "token": token,
                    "stale_after": -1 if self.options.break_lock else self.options.lock_stale_after,
                },
            )
            if not doc.get("acquired"):
                holder = doc.get("holder") or {}
                raise LockHeld(
                    f"{ctx.host.name} is locked by another run: {holder.get('user', '?')}@"
                    f"{holder.get('controller', '?')} pid {holder.get('pid', '?')} "
                    f"(task {holder.get('task', '?')}, for {holder.get('age_seconds', '?')}s); "
                    "wait for it, or pass --break-lock if that run is gone"
                )
            step.message = "taken over a stale lock" if doc.get("stale_taken_over") else ""
        # The lock step is bookkeeping, not a change or a task step anyone asked for.
        ctx.result.steps.remove(step)

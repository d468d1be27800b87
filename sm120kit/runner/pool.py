"""Run one host op on many hosts at once: bounded forks, isolated failures, live progress, recap.

A host op (`HostOp`) is a function `op(ctx: HostContext) -> None` run once per host in a
thread pool; the invoke task (tasks.py) that starts the run names it. It groups its work in
`with ctx.step("name") as step:` blocks (a step is "ok" unless the code marks it "changed"),
runs commands and remote scripts through the context, and records result fields with
`ctx.set(...)`. Whatever it raises is confined to its host: HostUnreachable makes
the host "unreachable", any other error "failed"; the other hosts go on.

SIGINT, SIGTERM and SIGHUP during a run cancel it in order: every command in flight is
killed with its process group (connection.cancel_all), hosts at work and hosts not started
are marked "interrupted", every host lock the run holds is released, and result.json is
written; the RunResult says which signal (`interrupted`) and the task layer exits 3.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import posixpath
import secrets
import signal
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import disk
from ..errors import HostUnreachable, Interrupted, LockHeld, Sm120Error, one_line
from ..inventory.host import Host, host_file
from ..output.progress import NullProgress, Progress
from ..remote.lib.download import redact_text
from . import controller
from .connection import ConnectOptions, cancel_all, reset_cancel, uncancelled, uncounted
from .host_context import HostContext, SkipHost
from .results import HostResult, RunResult
from .run import Run

if TYPE_CHECKING:
    from ..cache.wheels import WheelCache


@dataclass
class RunOptions:
    """How a run behaves, independent of what it does."""

    forks: int = 16
    check_mode: bool = False
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    run_root: str = "~/.cache/sm120kit/runs"
    #: A host lock not refreshed for this long (s) is stale; holders refresh it every fifth.
    lock_stale_after: float = 300.0
    break_lock: bool = False


def _redactor(secrets_: list[str]) -> logging.Filter:
    class Redact(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            message = redact_text(record.getMessage())
            for secret in secrets_:
                if secret:
                    message = message.replace(secret, "********")
            record.msg, record.args = message, None
            return True

    return Redact()


#: What the runner runs once per host: reads facts, acts, records through the context.
HostOp = Callable[[HostContext], None]


class Runner:
    """Runs host ops over hosts; owns the run directory and the progress display."""

    def __init__(self, options: RunOptions, progress: Progress | None = None) -> None:
        self.options = options
        self.progress = progress or NullProgress()
        self.run_dir: Path | None = None
        #: The hosts of the current run (what the wheel cache's election may wait for).
        self.host_names: frozenset[str] = frozenset()
        #: What the host threads of this run share (settings, wheel cache, once-per-run values).
        self.shared = Run()

    @property
    def settings(self) -> dict[str, Any]:
        """The task layer's settings (invoke.yaml), for run-wide services like the wheel cache."""
        return self.shared.settings

    @settings.setter
    def settings(self, value: dict[str, Any]) -> None:
        self.shared.settings = value

    @property
    def wheel_cache(self) -> WheelCache | None:
        """This run's wheel cache, once a build asked for it (``cache_for(runner)``)."""
        return self.shared.wheel_cache

    @wheel_cache.setter
    def wheel_cache(self, value: WheelCache | None) -> None:
        self.shared.wheel_cache = value

    def _make_run_dir(self, task: str) -> Path:
        root = Path(os.path.expanduser(self.options.run_root))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = root / f"{stamp}-{task.replace('.', '-')}-{secrets.token_hex(3)}"
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir

    def _logger(self, run_dir: Path, host: str) -> logging.Logger:
        log = logging.getLogger(f"sm120kit.runner.run.{run_dir.name}.{host}")
        log.propagate = False
        log.setLevel(logging.INFO)
        handler = logging.FileHandler(host_file(run_dir, host, ".log"), encoding="utf-8")
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
        op: HostOp,
        *,
        lock: bool = False,
    ) -> RunResult:
        """Run `op` on every host, at most `forks` at once, and return the results.

        A SIGINT/SIGTERM/SIGHUP (in the main thread) cancels the run: see the module doc.
        """
        run_dir = self._make_run_dir(task)
        self.run_dir = run_dir
        self.host_names = frozenset(h.name for h in hosts)
        results = {h.name: HostResult(h.name) for h in hosts}
        started: set[str] = set()
        interrupted: str | None = None
        reset_cancel()
        self.progress.start(task, [h.name for h in hosts], str(run_dir))
        previous = _trap_signals()
        try:
            forks = max(1, min(self.options.forks, len(hosts) or 1))
            pool = ThreadPoolExecutor(max_workers=forks, thread_name_prefix="host")
            try:
                futures = [
                    pool.submit(self._one, task, h, op, results[h.name], run_dir, lock, started)
                    for h in hosts
                ]
                for future in futures:
                    future.result()
            except (Interrupted, KeyboardInterrupt) as exc:
                interrupted = str(exc) or "SIGINT"
                # Further signals must not break the cleanup: the hosts' locks and the
                # result file are what the next run relies on.
                _ignore_signals()
                cancel_all(interrupted)
                pool.shutdown(wait=True, cancel_futures=True)
            finally:
                pool.shutdown(wait=True)
        finally:
            _restore_signals(previous)
            self.progress.stop()
        if interrupted:
            for name, res in results.items():
                if name not in started:
                    res.status = "interrupted"
                    res.error = f"not started: the run was interrupted ({interrupted})"
        result = RunResult(task, results, str(run_dir), self.options.check_mode)
        result.interrupted = interrupted
        (run_dir / "result.json").write_text(
            redact_text(json.dumps(result.to_dict(), indent=2, default=str))
        )
        return result

    def _one(
        self,
        task: str,
        host: Host,
        op: HostOp,
        result: HostResult,
        run_dir: Path,
        lock: bool,
        started: set[str],
    ) -> None:
        started.add(host.name)
        log = self._logger(run_dir, host.name)
        result.log = str(host_file(run_dir, host.name, ".log"))
        ctx = HostContext(host, self, result, log)
        self.progress.host_started(host.name)
        start = time.monotonic()
        token = secrets.token_hex(8)
        locked = False
        heartbeat: _Heartbeat | None = None
        try:
            if lock and not self.options.check_mode:
                self._acquire(ctx, task, token)
                locked = True
                heartbeat = _Heartbeat(ctx, token, self.options.lock_stale_after / 5)
            op(ctx)
            result.finish()
        except SkipHost as exc:
            result.status, result.error = "skipped", one_line(str(exc))
        except HostUnreachable as exc:
            result.status, result.error = "unreachable", one_line(str(exc))
        except Sm120Error as exc:
            result.status, result.error = "failed", one_line(str(exc))
            result.error = disk.out_of_space_note(ctx, result.error) + result.error
        except Interrupted as exc:
            result.status, result.error = "interrupted", f"interrupted ({exc})"
        except (
            Exception
        ) as exc:  # an unexpected error stays on its host, with a traceback in the log
            result.status = "failed"
            result.error = one_line(f"internal error: {type(exc).__name__}: {exc}")
            log.error("%s", traceback.format_exc())
            result.error = disk.out_of_space_note(ctx, result.error) + result.error
        finally:
            if heartbeat is not None:
                heartbeat.stop()
            if locked:
                try:
                    with uncancelled():
                        ctx.script(
                            "host_lock",
                            {"work_root": host.work_root, "action": "release", "token": token},
                            timeout=60,
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
            **controller.identity(),
            "user": getpass.getuser(),
            "task": task,
            "run_dir": str(self.run_dir),
        }
        args: dict[str, Any] = {
            "work_root": ctx.host.work_root,
            "action": "acquire",
            "owner": owner,
            "token": token,
            "stale_after": -1 if self.options.break_lock else self.options.lock_stale_after,
        }
        with ctx.step("lock") as step:
            doc = ctx.script("host_lock", args)
            holder = doc.get("holder") or {}
            if not doc.get("acquired") and controller.dead_here(holder):
                # The holder ran on this controller in this boot and its process is gone:
                # it can never release the lock, so take it over now (said in the output).
                ctx.log.info("lock holder pid %s on this controller is gone", holder.get("pid"))
                doc = ctx.script("host_lock", {**args, "dead_holder_since": holder.get("since")})
            if not doc.get("acquired"):
                holder = doc.get("holder") or {}
                raise LockHeld(
                    f"{ctx.host.name} is locked by another run: {holder.get('user', '?')}@"
                    f"{holder.get('controller', '?')} pid {holder.get('pid', '?')} "
                    f"(task {holder.get('task', '?')}, for {holder.get('age_seconds', '?')}s, "
                    f"last refreshed {holder.get('idle_seconds', '?')}s ago; stale after "
                    f"{self.options.lock_stale_after:.0f}s); wait for it, or pass --break-lock "
                    "if that run is gone"
                )
            swept = doc.get("swept") or []
            if swept:  # only the log: a dead run's temporaries are not news to the user
                ctx.log.info("lock: removed what earlier runs left: %s", ", ".join(swept))
            killed = doc.get("killed") or []
            left = f"; killed its leftover process groups {killed}" if killed else ""
            if doc.get("dead_taken_over"):
                step.message = (
                    f"took over the lock of run pid {holder.get('pid', '?')} (task "
                    f"{holder.get('task', '?')}): that process is gone from this controller{left}"
                )
            elif doc.get("stale_taken_over"):
                step.message = f"took over a stale lock{left}"
            else:
                step.message = ""
        if step.message:
            ctx.log.info("lock: %s", step.message)
            notes = ctx.result.data.setdefault("lock_notes", [])
            notes.append(step.message)
            self.progress.step(ctx.host.name, "lock", step.message)
        # The lock step is bookkeeping, not a change or a task step anyone asked for.
        ctx.result.steps.remove(step)
        # From here on each command leaves its process group id in the lock directory.
        ctx.keep_process_groups_in(posixpath.join(ctx.host.work_root, "locks", "run.lock"))


class _Heartbeat:
    """Refreshes a host lock every `interval` seconds while the run works on the host, so
    another controller can tell a live holder from a dead one in minutes."""

    def __init__(self, ctx: HostContext, token: str, interval: float) -> None:
        self._ctx, self._token = ctx, token
        self._interval = max(1.0, interval)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="host-lock-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        args = {"work_root": self._ctx.host.work_root, "action": "refresh", "token": self._token}
        while not self._stop.wait(self._interval):
            try:
                with uncancelled(), uncounted():
                    self._ctx.script("host_lock", args, timeout=60)
            except Exception as exc:  # noqa: BLE001 - a missed beat is not the host op's failure
                self._ctx.log.warning("host lock refresh failed: %s", one_line(str(exc)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=65)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _trap_signals() -> dict[int, Any] | None:
    """Turn SIGINT/SIGTERM/SIGHUP into Interrupted in the main thread; the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous: dict[int, Any] = {}
    for sig in _SIGNALS:
        previous[sig] = signal.signal(sig, _raise_interrupted)
    return previous


def _ignore_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _restore_signals(previous: dict[int, Any] | None) -> None:
    if previous is not None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def outside_run(
    host: Host, options: RunOptions | None = None, log: logging.Logger | None = None
) -> HostContext:
    """A context for one host outside a run (a test, a one-off check): the same logged and
    counted way to run things as a host op's, with no run directory and no host lock. Its log
    is `log`, or the logger ``sm120kit.host.<name>`` (silent unless configured)."""
    logger = log or logging.getLogger(f"sm120kit.host.{host.name}")
    return HostContext(host, Runner(options or RunOptions()), HostResult(host.name), logger)

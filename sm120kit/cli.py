"""The task layer's plumbing: settings, common flags, sessions, output and exit codes.

tasks.py stays thin: each task parses its flags, opens a `Session` here, hands the library a
task function, and calls `finish`. Exit codes: 0 all hosts ok/changed/skipped, 1 bad input
(inventory, recipe, flags), 2 a host failed or was unreachable.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import invoke
from invoke.exceptions import Exit
from rich.console import Console
from rich.markup import escape

from .connection import ConnectOptions
from .errors import Sm120Error  # noqa: F401  (re-exported for tasks.py)
from .host import Host
from .inventory import Inventory, load_inventory
from .progress import progress_for
from .report import recap
from .results import RunResult
from .runner import HostContext, Runner, RunOptions

#: Documented defaults; invoke.yaml's `sm120kit:` section overrides them.
DEFAULTS: dict[str, Any] = {
    "inventory": "inventory/hosts.yaml",
    "forks": 16,
    "known_hosts": None,  # None: ssh_config's UserKnownHostsFile, else ~/.ssh/known_hosts
    "accept_new_host_keys": False,
    "connect_timeout": 10,
    "connect_retries": 3,
    "retry_backoff": 0.5,
    "run_root": "~/.cache/sm120kit/runs",
    "lock_stale_after": 6 * 3600,
    "recipes_dir": "recipes",
}

SSH_PASSWORD_ENV = "SM120KIT_SSH_PASSWORD"
SUDO_PASSWORD_ENV = "SM120KIT_SUDO_PASSWORD"

EXIT_BAD_INPUT = 1
EXIT_HOST_FAILED = 2

#: Short flags for the common options (never -h: that is help).
SHORT_FLAGS = {"host": "H", "inventory": "i"}


class Sm120Task(invoke.Task):  # type: ignore[misc]
    """An invoke task whose short flags are fixed (-H, -i) instead of guessed from letters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["auto_shortflags"] = False
        super().__init__(*args, **kwargs)

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts: dict[str, Any] = super().arg_opts(name, default, taken_names)
        if name in SHORT_FLAGS:
            opts["names"] = [*opts["names"], SHORT_FLAGS[name]]
        return opts


F = TypeVar("F", bound=Callable[..., Any])


def task(*args: Any, **kwargs: Any) -> Any:
    """`@task` for sm120kit tasks: fixed short flags and one-line errors."""
    kwargs.setdefault("klass", Sm120Task)
    return invoke.task(*args, **kwargs)


def make_console(stderr: bool = False) -> Console:
    """A console; wide when not a terminal so CI logs keep table rows on one line."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=max(console.width, 160))
    return console


def settings(c: invoke.Context) -> dict[str, Any]:
    """DEFAULTS overlaid with invoke.yaml's `sm120kit:` section."""
    merged = dict(DEFAULTS)
    try:
        section = c.config.get("sm120kit", {}) or {}
    except AttributeError:
        section = {}
    merged.update({k: v for k, v in dict(section).items()})
    return merged


@dataclass
class Session:
    """One task invocation: its settings, inventory, selected hosts, runner and consoles."""

    settings: dict[str, Any]
    inventory: Inventory
    hosts: list[Host]
    runner: Runner
    json: bool
    out: Console  # human output (stderr when --json, so stdout holds only the JSON)
    err: Console

    def run(
        self, task_name: str, fn: Callable[[HostContext], None], *, lock: bool = False
    ) -> RunResult:
        return self.runner.run(task_name, self.hosts, fn, lock=lock)


def open_session(
    c: invoke.Context,
    *,
    host: str | None,
    inventory: str | None = None,
    forks: int | None = None,
    json_output: bool = False,
    accept_new_host_keys: bool = False,
    check_mode: bool = False,
    break_lock: bool = False,
    ask_pass: bool = False,
    need_hosts: bool = True,
) -> Session:
    """Resolve settings, inventory and the --host pattern into a ready Session."""
    conf = settings(c)
    err = make_console(stderr=True)
    out = err if json_output else make_console()
    inventory_path = inventory or conf["inventory"]
    if inventory is None and not Path(inventory_path).exists():
        inv = load_inventory(None)  # the default inventory is optional: `local` still works
    else:
        inv = load_inventory(inventory_path)
    hosts: list[Host] = []
    if need_hosts:
        if not host:
            raise Sm120Error("--host is required (a host, group, pattern, or 'local')")
        hosts = inv.select(host)
    if forks is not None and forks < 0:
        raise Sm120Error(f"--forks must be a positive number, got {forks}")
    ssh_password = os.environ.get(SSH_PASSWORD_ENV) or None
    if ask_pass and not ssh_password:
        ssh_password = getpass.getpass("SSH password: ")
    options = RunOptions(
        forks=forks or int(conf["forks"]),
        check_mode=check_mode,
        connect=ConnectOptions(
            known_hosts=conf.get("known_hosts"),
            accept_new_host_keys=accept_new_host_keys or bool(conf["accept_new_host_keys"]),
            connect_timeout=float(conf["connect_timeout"]),
            connect_retries=int(conf["connect_retries"]),
            retry_backoff=float(conf["retry_backoff"]),
            ssh_password=ssh_password,
            sudo_password=os.environ.get(SUDO_PASSWORD_ENV) or None,
        ),
        run_root=str(conf["run_root"]),
        lock_stale_after=float(conf["lock_stale_after"]),
        break_lock=break_lock,
    )
    runner = Runner(options, progress_for(err, enabled=True))
    runner.settings = conf
    return Session(conf, inv, hosts, runner, json_output, out, err)


def finish(
    session: Session,
    result: RunResult,
    render: Callable[[Console, RunResult], None] | None = None,
) -> None:
    """Print the result (one JSON document, or tables and the recap) and set the exit code."""
    if session.json:
        sys.stdout.write(json.dumps(result.to_dict(), default=str, sort_keys=False) + "\n")
        sys.stdout.flush()
    else:
        if render is not None:
            render(session.out, result)
    recap(session.err, result)
    if not result.ok:
        raise Exit(code=EXIT_HOST_FAILED)


def guarded(json_flag: str = "json") -> Callable[[F], F]:
    """Turn a user-input error into one line (or one JSON document) and exit status 1."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Sm120Error as exc:
                if kwargs.get(json_flag):
                    sys.stdout.write(json.dumps({"error": str(exc), "hosts": {}}) + "\n")
                Console(stderr=True).print(
                    f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
                )
                raise Exit(code=EXIT_BAD_INPUT) from None

        return inner  # type: ignore[return-value]

    return wrap


def show_inventory(
    c: invoke.Context, *, host: str | None, inventory: str | None, json_output: bool
) -> None:
    """`invoke inventory`: resolved hosts (all, or those --host selects), groups and vars."""
    from rich.table import Table

    session = open_session(
        c, host=host, inventory=inventory, json_output=json_output, need_hosts=bool(host)
    )
    doc = session.inventory.to_dict()
    if host:
        names = [h.name for h in session.hosts]
        doc["hosts"] = {
            h.name: {"groups": h.groups, "vars": h.vars, "var_sources": h.var_sources}
            for h in session.hosts
        }
        doc["selected"] = names
    if json_output:
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
        return
    table = Table(title=f"inventory {session.inventory.path or '(none)'}", show_lines=True)
    for col in ("host", "groups", "vars (source)"):
        table.add_column(col, overflow="fold")
    for name, entry in doc["hosts"].items():
        sources = entry.get("var_sources", {})
        lines = [
            f"{k} = {v!r}  [dim]({sources.get(k, '?')})[/]"
            for k, v in sorted(entry["vars"].items())
        ]
        table.add_row(name, ", ".join(entry["groups"]), "\n".join(lines))
    session.out.print(table)


def show_document(
    c: invoke.Context,
    doc: dict[str, Any],
    json_output: bool,
    render: Callable[[Console, dict[str, Any]], None],
) -> None:
    """Print a host-less document (recipes catalog, cache listings): JSON or a table."""
    if json_output:
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
    else:
        render(make_console(), doc)

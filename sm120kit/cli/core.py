"""The task layer's plumbing: settings, sessions, the task decorator and exit codes.

The flags are declared in `cli/flags.py`; everything people see is printed by `output/`.
tasks.py stays thin: each task names its flags, opens a `Session` here, hands the library a
host op (`runner.HostOp`, run once per host), and calls `finish`. Exit codes: 0 all hosts
ok/changed/skipped, 1 bad input (inventory, recipe, flags, settings), 2 a host failed or was
unreachable, 3 interrupted (SIGINT, SIGTERM or SIGHUP; the JSON document is still printed,
with hosts `interrupted`).
Every flag, setting and path-naming host var is checked before any host is touched.
"""

from __future__ import annotations

import functools
import getpass
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import invoke
import invoke.parser
from invoke.exceptions import Exit
from rich.console import Console

from .. import settings as setting_table
from .. import validate
from ..cache.config import CacheConfig
from ..errors import Interrupted, Sm120Error, one_line
from ..inventory.host import Host
from ..inventory.load import Inventory, load_inventory
from ..output.console import make_console, print_error, print_json
from ..output.progress import progress_for
from ..output.report import inventory_table, recap
from ..runner import interrupts
from ..runner.connection import ConnectOptions
from ..runner.pool import HostOp, Runner, RunOptions
from ..runner.results import RunResult
from . import flags

SSH_PASSWORD_ENV = "SM120KIT_SSH_PASSWORD"
SUDO_PASSWORD_ENV = "SM120KIT_SUDO_PASSWORD"

EXIT_BAD_INPUT = 1
EXIT_HOST_FAILED = 2
EXIT_INTERRUPTED = 3


#: The declared INVOKE_SM120KIT_* variables, taken out of the environment when tasks.py is
#: loaded (before invoke reads it, which would turn "false" into true and die on "abc");
#: `settings` parses them.
_ENV = setting_table.take_env()

#: Short flags for the common options (never -h: that is help).
SHORT_FLAGS = {"host": "H", "inventory": "i"}


class _RawValue(invoke.parser.Argument):  # type: ignore[misc]
    """A numeric flag's value kept as typed: Sm120Task checks it (one line, not a traceback)."""

    def set_value(self, value: Any, cast: bool = True) -> None:
        super().set_value(value, cast=False)


class Sm120Task(invoke.Task):  # type: ignore[misc]
    """An invoke task whose short flags are fixed (-H, -i) instead of guessed from letters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["auto_shortflags"] = False
        super().__init__(*args, **kwargs)

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts: dict[str, Any] = super().arg_opts(name, default, taken_names)
        if name in SHORT_FLAGS:
            opts["names"] = [*opts["names"], SHORT_FLAGS[name]]
        if type(default) in (int, float):
            # invoke would cast `--forks abc` itself and die with a traceback; the value comes
            # in as text (`_RawValue`) and __call__ checks it (one line, exit 1, JSON under
            # --json). An int flag keeps kind int so that --help says INT; invoke's help names
            # no other number kind, so a float flag is shown as STRING.
            self._numeric = {**getattr(self, "_numeric", {}), name: type(default)}
            if type(default) is float:
                opts["kind"] = str
        return opts

    def get_arguments(self, *args: Any, **kwargs: Any) -> list[Any]:
        arguments: list[Any] = super().get_arguments(*args, **kwargs)
        for argument in arguments:
            if argument.name in getattr(self, "_numeric", {}):
                argument.__class__ = _RawValue
        return arguments

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for name, kind in getattr(self, "_numeric", {}).items():
            value = kwargs.get(name)
            if not isinstance(value, str) and getattr(flags.FLAGS.get(name), "optional", False):
                kwargs[name] = None
            elif isinstance(value, str):
                flag = "--" + name.replace("_", "-")
                try:
                    kwargs[name] = validate.number(
                        value,
                        flag,
                        kind=kind,
                        maximum=getattr(flags.FLAGS.get(name), "maximum", None),
                    )
                except Sm120Error as exc:
                    fail(exc, bool(kwargs.get("json")))
        return super().__call__(*args, **kwargs)


F = TypeVar("F", bound=Callable[..., Any])


def task(
    *flag_names: str,
    name: str | None = None,
    help: Mapping[str, str] | None = None,
    positional: list[str] | None = None,
    iterable: list[str] | None = None,
) -> Callable[[Callable[..., None]], Sm120Task]:
    """`@task` for a body ``fn(c, **flags)``: its flags are `flag_names` (declared once in
    `sm120kit.cli.flags`, in this order; `help` overrides a text), fixed short flags, one-line
    errors (`guarded`)."""

    def wrap(body: Callable[..., None]) -> Sm120Task:
        inner = guarded()(body)
        cast(Any, inner).__signature__ = flags.signature(body, flag_names)
        options: dict[str, Any] = {"klass": Sm120Task, "help": flags.helps(flag_names, help)}
        if name is not None:
            options["name"] = name
        if positional is not None:
            options["positional"] = positional
        if iterable is not None:
            options["iterable"] = iterable  # flags given more than once (a list)
        made: Sm120Task = invoke.task(**options)(inner)
        return made

    return wrap


def settings(c: invoke.Context) -> dict[str, Any]:
    """Every declared setting (sm120kit.settings), parsed: its default, overlaid by invoke's
    config files' `sm120kit:` sections, then by INVOKE_SM120KIT_* variables. A bad value,
    whatever its source, is one Sm120Error naming the setting and the source, raised before
    any host is touched (the cache block and its store specs are checked here too)."""

    config = getattr(c, "config", None)
    env = {**_ENV, **{k: v for k, v in os.environ.items() if k in _DECLARED_ENV}}
    merged = setting_table.resolve(setting_table.config_layers(config), env)
    CacheConfig.from_settings(merged)
    return merged


_DECLARED_ENV = frozenset(s.env for s in setting_table.SETTINGS)


def check_known_hosts(path: str | None) -> None:
    """The known_hosts file (the setting, else the default ~/.ssh/known_hosts) must be a
    file when it exists; a directory there is a setting error, said before any host."""
    full = Path(os.path.expanduser(str(path or DEFAULT_KNOWN_HOSTS)))
    if full.exists() and not full.is_file():
        what = (
            "setting known_hosts"
            if path
            else "known_hosts (the default; setting known_hosts is null)"
        )
        raise Sm120Error(
            f"{what}: {full} is not a file (a directory?); point setting known_hosts "
            "(invoke.yaml or INVOKE_SM120KIT_KNOWN_HOSTS) at a known_hosts file"
        )


DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def check_run_root(path: str) -> None:
    """run_root must be a directory this user can create and write in."""
    root = Path(os.path.expanduser(str(path)))
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise Sm120Error(
            f"setting run_root: cannot write run logs under {root} ({reason}); set run_root "
            "in invoke.yaml or INVOKE_SM120KIT_RUN_ROOT to a writable directory"
        ) from None


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

    def run(self, task_name: str, op: HostOp, *, lock: bool = False) -> RunResult:
        """Run the host op `op` on the selected hosts under the invoke task's name."""
        return self.runner.run(task_name, self.hosts, op, lock=lock)


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
    for h in hosts:
        validate.check_host_vars(h.name, h.vars, h.var_sources)
    if forks is not None:
        forks = validate.number(forks, "--forks", kind=int)
    check_known_hosts(conf.get("known_hosts"))
    if need_hosts:
        check_run_root(str(conf["run_root"]))
    ssh_password = os.environ.get(SSH_PASSWORD_ENV) or None
    if ask_pass and not ssh_password:
        ssh_password = getpass.getpass("SSH password: ")
    sudo_password = os.environ.get(SUDO_PASSWORD_ENV) or None
    # Read once, then out of this process's environment: nothing the run starts (local
    # commands, pip, nvcc, a user's --python) inherits them.
    for name in (SSH_PASSWORD_ENV, SUDO_PASSWORD_ENV):
        os.environ.pop(name, None)
    options = RunOptions(
        forks=forks or int(conf["forks"]),
        check_mode=check_mode,
        connect=ConnectOptions(
            known_hosts=conf.get("known_hosts"),
            accept_new_host_keys=accept_new_host_keys or bool(conf["accept_new_host_keys"]),
            connect_timeout=float(conf["connect_timeout"]),
            connect_retries=int(conf["connect_retries"]),
            retry_backoff=float(conf["retry_backoff"]),
            max_sessions=int(conf["ssh_max_sessions"]),
            silence_timeout=float(conf["ssh_silence_timeout"]),
            ssh_password=ssh_password,
            sudo_password=sudo_password,
        ),
        run_root=str(conf["run_root"]),
        lock_stale_after=float(conf["lock_stale_after"]),
        break_lock=break_lock,
    )
    runner = Runner(options, progress_for(err, enabled=True))
    runner.settings = conf
    runner.shared.inventory = dict(inv.hosts)
    return Session(conf, inv, hosts, runner, json_output, out, err)


def finish(
    session: Session,
    result: RunResult,
    render: Callable[[Console, RunResult], None] | None = None,
) -> None:
    """Print the result (one JSON document, or tables and the recap) and set the exit code."""
    if session.json:
        print_json(result.to_dict())
    else:
        if render is not None:
            render(session.out, result)
    recap(session.err, result)
    if result.interrupted:
        raise Exit(code=EXIT_INTERRUPTED)
    if not result.ok:
        raise Exit(code=EXIT_HOST_FAILED)


def fail(
    exc: BaseException,
    json_output: bool,
    code: int = EXIT_BAD_INPUT,
    signal_name: str = "SIGINT",
) -> None:
    """Print an input error as one line (and one JSON document under --json); exit `code`.
    With EXIT_INTERRUPTED the document says which signal (`signal_name`), as a run's does."""
    message = one_line(str(exc)) or type(exc).__name__
    if json_output:
        doc: dict[str, Any] = {"error": message, "hosts": {}}
        if code == EXIT_INTERRUPTED:
            doc["interrupted"] = signal_name
        print_json(doc)
    print_error(message)
    raise Exit(code=code) from None


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def guarded(json_flag: str = "json") -> Callable[[F], F]:
    """Turn a user-input error into one line (or one JSON document) and exit status 1; a
    SIGINT/SIGTERM/SIGHUP outside a run's hosts into exit status 3."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            previous = {}
            if threading_main():
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    previous[sig] = signal.signal(sig, _interrupt)
            try:
                with interrupts.body_running():
                    return fn(*args, **kwargs)
            except Sm120Error as exc:
                fail(exc, bool(kwargs.get(json_flag)))
            except (Interrupted, KeyboardInterrupt) as exc:
                signame = str(exc) or "SIGINT"
                fail(
                    Interrupted(f"interrupted ({signame})"),
                    bool(kwargs.get(json_flag)),
                    EXIT_INTERRUPTED,
                    signame,
                )
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        return inner  # type: ignore[return-value]

    return wrap


def threading_main() -> bool:
    """True in the main thread (the only one that may set signal handlers)."""

    return threading.current_thread() is threading.main_thread()


def show_inventory(
    c: invoke.Context, *, host: str | None, inventory: str | None, json_output: bool
) -> None:
    """`invoke inventory`: resolved hosts (all, or those --host selects), groups and vars."""
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
        print_json(doc)
        return
    session.out.print(inventory_table(session.inventory.path, doc))

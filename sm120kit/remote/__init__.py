"""Stdlib-only scripts that run on hosts, shipped over SSH like Ansible modules.

Each script reads one JSON document from argv[1] and prints one JSON document on stdout.
The script travels on stdin (`python3 -`), and so do its arguments: `script_program` puts
them in front of the program, which sets ``sys.argv[1]`` before the script runs. The command
line stays a few bytes whatever the arguments weigh (Linux refuses any single argument over
128 KiB, MAX_ARG_STRLEN, and a lock's file list is larger), and running a script still costs
exactly one command. A script may import the hosts' library, ``sm120kit.remote.lib.<module>`` (stdlib only, like
Ansible's module_utils): `script_bundle` ships those modules with it in the same program, served
from memory by an import hook, so the host needs no sm120kit and no file is written.
"""

from __future__ import annotations

import ast
import base64
import json
import shlex
import threading
import zlib
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..errors import HostFailed
from ..memo import once

if TYPE_CHECKING:
    # Only the run API (runner.host_context.HostContext.script) hands run_script its
    # connection.
    from ..runner.connection import Connection

LIB = f"{__package__}.lib"

#: Scripts started hundreds of times in one run (one per locked file) that import nothing
#: outside the standard library: run with ``-S``, without ``site``. Its import (every ``.pth``
#: file of every installed package) costs more than such a script's own work: 85 ms a start
#: with pyenv's 3.11 here against 18 ms (docs/benchmarks.md, "The streamed install").
NO_SITE = frozenset({"fetch_release"})

#: Scripts that serve many requests, one JSON line each, on one start (`runner/service.py`,
#: `HostContext.ask`), rather than one argument and one answer (`run_script`).
SERVICES = frozenset({"fetch_release"})

#: Runs first on the host: unpacks the bundled sources (zlib, base64: a third of their size on
#: the wire), serves the library modules from memory, then runs the script as ``__main__``
#: (compiled on its own, so its ``from __future__`` imports still count).
_BOOT = """\
import sys as _sm120kit_sys


def _sm120kit_install(blob, packages):
    import base64
    import importlib.abc
    import importlib.util
    import json
    import zlib

    sources = json.loads(zlib.decompress(base64.b64decode(blob)).decode("utf-8"))

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name not in sources:
                return None
            origin = "<sm120kit>/" + name.replace(".", "/") + ".py"
            return importlib.util.spec_from_loader(
                name, self, origin=origin, is_package=name in packages
            )

        def create_module(self, spec):
            return None

        def get_source(self, name):
            return sources[name]

        def exec_module(self, module):
            code = compile(sources[module.__name__], module.__spec__.origin, "exec")
            exec(code, module.__dict__)

    _sm120kit_sys.meta_path.insert(0, Finder())
    return sources.pop("__main__")


_sm120kit_main = _sm120kit_install(%(blob)r, %(packages)r)
del _sm120kit_install
exec(compile(_sm120kit_main, %(origin)r, "exec"))
"""


@cache
def script_source(name: str) -> str:
    """The source text of `sm120kit/remote/<name>.py` (or of a library module, ``lib/<name>``)."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")


#: CPython 3.11's ast.parse is not thread-safe: runner threads bundling scripts at once failed
#: with "SystemError: AST constructor recursion depth mismatch" (seen in CI, one host of eight
#: "failed"; the same error from threaded parses: pytest-dev/pytest#10763, home-assistant/core#95364).
#: One parse at a time.
_AST_LOCK = threading.Lock()


def lib_imports(source: str) -> list[str]:
    """The ``sm120kit.remote.lib`` modules `source` imports, in the order it names them."""
    return list(_lib_imports(source))


@once
def _lib_imports(source: str) -> tuple[str, ...]:
    # Once per text: every script's closure reads the same library modules again.
    found: list[str] = []
    with _AST_LOCK:
        nodes = list(ast.walk(ast.parse(source)))
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != LIB else []
            if node.module == LIB:
                names = [f"{LIB}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__bundle__" for t in node.targets
        ):
            # Modules whose text the module reads (never imports): listed, not imported.
            names = [
                e.value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
        else:
            continue
        found += [n for n in names if n.startswith(LIB + ".") and n not in found]
    return tuple(found)


def lib_closure(source: str) -> list[str]:
    """Every library module `source` needs, directly or through another library module."""
    todo, seen = lib_imports(source), []
    while todo:
        module = todo.pop(0)
        if module in seen:
            continue
        seen.append(module)
        todo += lib_imports(script_source(_lib_path(module)))
    return sorted(seen)


def _lib_path(module: str) -> str:
    return module[len(__package__) + 1 :].replace(".", "/")


@once
def script_bundle(name: str) -> str:
    """The program that runs remote script `name` on a host: it and the library it imports.

    Fed to ``python3 -`` on stdin, it is still one command; the host needs only the stdlib.
    Made once per process (`memo.once`: the hosts of a run ask for the same bundles at the
    same moment)."""
    source = script_source(name)
    modules = lib_closure(source)
    if not modules:
        return source
    # Every parent of a bundled module is a package (an empty one unless bundled itself).
    packages = sorted({m.rsplit(".", i)[0] for m in modules for i in range(1, m.count(".") + 1)})
    sources = {p: "" for p in packages}
    sources.update({m: script_source(_lib_path(m)) for m in modules})
    sources["__main__"] = source
    blob = base64.b64encode(zlib.compress(json.dumps(sources).encode("utf-8"), 9)).decode()
    return _BOOT % {
        "blob": blob,
        "packages": sorted(packages),
        "origin": f"<sm120kit>/{__package__.replace('.', '/')}/{name}.py",
    }


def script_command(python: str, args: dict[str, Any]) -> str:
    """How a script run is shown to people (plan, logs): the interpreter, then the arguments
    that travel on stdin with the program (`script_program`), never on the command line."""
    shown = json.dumps(args, sort_keys=True)
    return f"{shlex.quote(python)} - {shlex.quote(shown)}  # program and arguments on stdin"


#: What runs first in every program fed to a host: the arguments become ``sys.argv[1]``, then
#: the script (with its bundled library) runs as ``__main__``, compiled on its own so that its
#: ``from __future__`` imports still count.
_ARGV = """\
import sys as _sm120kit_sys
_sm120kit_sys.argv[1:] = [%(args)r]
del _sm120kit_sys
exec(compile(%(program)r, %(origin)r, "exec"))
"""


def script_program(name: str, args: dict[str, Any] | None = None) -> str:
    """The whole program fed to ``python3 -`` for remote script `name`: its arguments
    (any size) followed by `script_bundle`."""
    return _ARGV % {
        "args": json.dumps(args or {}, sort_keys=True),
        "program": script_bundle(name),
        "origin": f"<sm120kit>/{__package__.replace('.', '/')}/{name}.py",
    }


def run_script(
    conn: Connection,
    name: str,
    args: dict[str, Any] | None = None,
    *,
    python: str | None = None,
    timeout: float | None = None,
    path: list[str] | None = None,
) -> dict[str, Any]:
    """Run a remote script on `conn` and return its JSON result; `path` goes in front of the
    host's PATH (extended on the host: only there is its current value known).

    A script that exits non-zero without printing JSON raises HostFailed with the tail of
    its stderr; one that prints JSON is returned as is (the JSON says what went wrong).
    """
    if name in SERVICES:
        raise ValueError(f"{name} is a service: ask it (HostContext.ask), do not run it")
    interpreter = python or conn.host.python
    command = f"{shlex.quote(interpreter)} {'-S -' if name in NO_SITE else '-'}"
    if path:
        command = f'PATH={shlex.quote(":".join(path))}:"$PATH" ' + command
    result = conn.run(command, stdin=script_program(name, args), timeout=timeout)
    doc = parse_last_json(result.stdout)
    if doc is None:
        tail = (result.stderr.strip() or result.stdout.strip())[-800:]
        if result.exit_code == 127 or "not found" in tail and interpreter in tail:
            raise HostFailed(f"no Python at '{interpreter}' on the host ({tail.splitlines()[-1]})")
        if result.exit_code == 124:
            raise HostFailed(f"remote step {name} timed out after {timeout}s")
        raise HostFailed(f"remote step {name} failed (exit {result.exit_code}): {tail}")
    return doc


def parse_last_json(stdout: str) -> dict[str, Any] | None:
    """The last line of stdout that is a JSON object (scripts may print noise before it)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None

"""The flags every invoke task shows: declared once (sm120kit/cli/flags.py), the same as before.

Reads tasks.py's collection the way `invoke --help TASK` does (each task's arguments in a
parser context) and compares every flag, its value kind and its help text to this list.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from invoke.parser import ParserContext

ROOT = Path(__file__).resolve().parents[2]

COMMON = {"host", "inventory", "json", "forks", "accept-new-host-keys", "ask-pass"}
RECIPE = {"driver", "arch", "recipe"}
BUILD = COMMON | RECIPE | {"break-lock", "explain", "rebuild", "max-jobs", "nvcc-threads"}

EXPECTED: dict[str, set[str]] = {
    "facts": COMMON,
    "inventory": {"host", "inventory", "json"},
    "recipes": COMMON | RECIPE,
    "plan": COMMON
    | RECIPE
    | {"explain", "package", "stack", "no-stack", "engine", "verbose", "no-system-python"},
    "provision": COMMON
    | RECIPE
    | {"break-lock", "max-jobs", "nvcc-threads", "rebuild", "recheck", "stack", "no-stack"}
    | {"engine", "verbose", "no-system-python"},
    "install-cuda": COMMON | RECIPE | {"break-lock"},
    "build": BUILD | {"package"},
    "build-sgl-kernel": BUILD,
    "build-flash-attn": BUILD,
    "smoke": COMMON | RECIPE | {"package", "python", "engine"},
    "serve-check": COMMON
    | RECIPE
    | {"url", "timeout", "pid", "process-match", "launch", "python", "strict", "model-config"}
    | {"engine"},
    "preflight": COMMON
    | RECIPE
    | {"python", "launch", "strict", "model-config", "stop-warm", "engine"},
    "cache.key": COMMON | RECIPE | {"package"},
    "cache.list": {"json", "store"},
    "cache.verify": {"json", "store"},
    "cache.prune": {"json", "older-than", "keep", "max-size", "store"},
    "cache.export": {"directory", "json", "store"},
    "cache.import": {"directory", "json", "store"},
    "sources.fetch": {"package", "recipe", "mirror", "refresh", "json"},
    "sources.list": {"json"},
    "lock.draft": {
        "top",
        "constraint",
        "recipe",
        "out",
        "platform",
        "index",
        "lock-python",
        "driver",
        "arch",
        "json",
    },
    "lock.convert": {"path", "out", "json"},
    "lock.catalogue": {"lock-dir", "arch", "json"},
}

#: The help text of each flag, as `invoke --help TASK` showed it before the flags were
#: declared once (sources.fetch words --package its own way).
HELP = {
    "constraint": "a version range the resolver must keep to, e.g. 'cuda-python>=13'; give it more than once for more; kept with the locks in their directory's constraints.txt",
    "strict": "fail the host when a check is unknown (a backend whose support for the GPU cannot be read, a hub model whose config is not at hand), not only warn",
    "stop-warm": "stop the host's warm resolution server(s) (sglang kept imported between "
    "preflights) and judge nothing; says 'no warm server' when none runs",
    "model-config": "for a hub model id: its config.json on this machine (or a directory holding it), which sglang's resolution on the host then reads",
    "host": "host, group, pattern (all:!gpu3, gpu*, a,b), 'local', or user@addr:port",
    "inventory": "inventory file (default from invoke.yaml: inventory/hosts.yaml)",
    "json": "print exactly one JSON document on stdout",
    "forks": "hosts worked on at once (0 = invoke.yaml's forks, default 16)",
    "accept-new-host-keys": "trust and record unknown SSH host keys (changed keys are still refused)",
    "ask-pass": "prompt for the SSH password (or set SM120KIT_SSH_PASSWORD)",
    "driver": "target NVIDIA driver version (for hosts without a GPU; overrides facts)",
    "arch": "target compute capability, e.g. 12.0 (for hosts without a GPU; overrides facts)",
    "recipe": "force this recipe (file stem under recipes/, e.g. r580)",
    "break-lock": "take over the per-host lock even if another run holds it",
    "package": "package name from the recipe (e.g. minikernel, flash-attn, sgl-kernel)",
    "explain": "print the resolved build env, flags and the reason for each",
    "rebuild": "build even when the installed wheel or a cached one has the key (replaces the "
    "cached wheel; for a wheel found bad by something the key does not cover)",
    "max-jobs": "override MAX_JOBS (parallel compile jobs) for this run",
    "nvcc-threads": "override NVCC_THREADS / SGL_KERNEL_COMPILE_THREADS for this run",
    "recheck": "run the smoke checks even where a remembered verdict still applies",
    "verbose": "list every command of every step (a lock's fetches one by one; --json has them "
    "all)",
    "python": "check this interpreter or venv instead of the recipe's managed env",
    "url": "server URL as seen from the host, e.g. http://127.0.0.1:8000",
    "timeout": "seconds to wait for readiness",
    "pid": "the server's process id on the host (for the evidence when the port is not open)",
    "process-match": "regex on the server's whole command line (default: a process whose "
    "program or Python module/script is sglang/vllm/uvicorn-like)",
    "launch": "the launch command as one string (python -m sglang.launch_server ARGS), "
    "instead of the words after --",
    "older-than": "prune entries older than this many days (0: every entry)",
    "keep": "prune all but the newest N entries per package (0: all of them)",
    "max-size": "prune least recently used entries until the store is below this (e.g. 50G)",
    "store": "only this store (name from invoke.yaml's cache.stores, or 'local')",
    "directory": "directory to export to / import from (usable with pip --find-links)",
    "mirror": "directory holding <dir>/ per source (default: setting sources_mirror)",
    "refresh": "read stored sources again and replace those whose tree changed (a corrected or "
    "deliberately patched mirror still claims the same commit)",
    "stack": "install the recipe's serving stack even where host var provision_stack is false "
    "(the stack is the default)",
    "engine": "the serving engine (sglang, vllm): its stack and its launches, over host/group var "
    "stack",
    "no-stack": "leave the serving stack alone: build only the packages named (--package, vars)",
    "no-system-python": "never install the distribution's Python as root for the stack (as host "
    "var allow_system_python: false): a host without a locked Python is refused instead",
    "top": "the top-level requirement to lock, pinned (e.g. sglang==0.5.23)",
    "out": "lock file to write (default locks/<name>-<version>/pylock.cp<XY>-<platform>.toml)",
    "path": "the lock file to read",
    "lock-dir": "a lock directory (locks/sglang-0.5.23) whose catalogue.toml to write",
    "platform": "newest platform tag the lock accepts",
    "index": "an index to resolve from, e.g. https://pypi.org/simple (default); give it more than "
    "once for more (a wheel stub's own index); the recipe's [stack] indexes are added",
    "lock-python": "Python X.Y to lock for, comma-separated (default: every X.Y the release has "
    "wheels for)",
}
HELP_OVERRIDES = {
    ("sources.fetch", "package"): "package whose source and dependencies to fetch (e.g. sgl-kernel)"
}

#: Value shown after the flag in --help: INT for whole numbers, STRING for text and for
#: fractional numbers (invoke names no float kind), nothing for on/off flags.
INT_FLAGS = {"forks", "max-jobs", "nvcc-threads", "pid", "keep"}
#: Flags that may be given more than once (invoke's help shows them without a kind).
LIST_FLAGS = {"index", "constraint"}
BOOL_FLAGS = {
    "json",
    "stop-warm",
    "accept-new-host-keys",
    "ask-pass",
    "break-lock",
    "explain",
    "recheck",
    "rebuild",
    "refresh",
    "stack",
    "no-stack",
    "verbose",
    "no-system-python",
    "strict",
}


def _collection() -> Any:
    spec = importlib.util.spec_from_file_location("sm120kit_tasks_under_test", ROOT / "tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ns


def _help_rows(collection: Any, name: str) -> dict[str, tuple[str, str]]:
    """{long flag: (flag spec, help text)} as `invoke --help NAME` prints them."""
    context = ParserContext(name=name, args=collection[name].get_arguments())
    rows = {}
    for spec, text in context.help_tuples():
        long = next(part for part in spec.split(", ") if part.startswith("--"))
        rows[long[2:].split("=")[0].replace("[no-]", "")] = (spec, text)
    return rows


@pytest.fixture(scope="module")
def collection() -> Any:
    return _collection()


def test_every_task_is_listed(collection: Any) -> None:
    assert set(collection.task_names) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_flags_help_and_kinds(collection: Any, name: str) -> None:
    rows = _help_rows(collection, name)
    assert set(rows) == EXPECTED[name]
    for flag, (spec, text) in rows.items():
        assert text == HELP_OVERRIDES.get((name, flag), HELP[flag]), flag
        if flag in BOOL_FLAGS or flag in LIST_FLAGS:
            assert spec == f"--{flag}", spec
        else:
            kind = "INT" if flag in INT_FLAGS else "STRING"
            assert f"--{flag}={kind}" in spec, spec
    if "host" in rows:
        assert rows["host"][0] == "-H STRING, --host=STRING"
        assert rows["inventory"][0] == "-i STRING, --inventory=STRING"


def test_invoke_help_shows_int_and_bad_number_is_one_line(tmp_path: Path) -> None:
    """Through the real `invoke` command: --help says INT; `--forks abc` is one line, exit 1."""
    env_cmd = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]
    shown = subprocess.run(
        [*env_cmd, "--help", "facts"], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert "--forks=INT" in shown.stdout
    bad = subprocess.run(
        [*env_cmd, "facts", "-H", "local", "--forks", "abc"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip() == "error: --forks: expected a whole number, got 'abc'"

"""Every flag the invoke tasks take, declared once: its default and its help text.

A task names the flags it takes (`cli.task("package", *COMMON, ...)`); its body is
``fn(c, **flags)`` and `signature` gives it the signature invoke reads (invoke builds a task's
flags from its signature with `inspect.signature`, which honours ``__signature__``). The
default's type is the flag's kind: an int default makes ``--forks=INT`` in ``--help``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..settings import MAX_COUNT, MAX_SECONDS

#: Linux's largest pid (PID_MAX_LIMIT, 2**22): a larger --pid names no process.
MAX_PID = 4_194_304


@dataclass(frozen=True)
class Flag:
    """One task flag: its default (its type is the flag's kind), its help text and, for a
    number, its largest value (every number reaches a timer, a sleep or a loop)."""

    default: Any
    help: str
    maximum: float | None = None
    #: A number whose every value means something (0 included): not given, it reaches the task
    #: as None rather than as its default, so that 0 is a value and not "unset".
    optional: bool = False


FLAGS: dict[str, Flag] = {
    "host": Flag(None, "host, group, pattern (all:!gpu3, gpu*, a,b), 'local', or user@addr:port"),
    "inventory": Flag(None, "inventory file (default from invoke.yaml: inventory/hosts.yaml)"),
    "json": Flag(False, "print exactly one JSON document on stdout"),
    "forks": Flag(
        0, "hosts worked on at once (0 = invoke.yaml's forks, default 16)", maximum=MAX_COUNT
    ),
    "accept_new_host_keys": Flag(
        False, "trust and record unknown SSH host keys (changed keys are still refused)"
    ),
    "ask_pass": Flag(False, "prompt for the SSH password (or set SM120KIT_SSH_PASSWORD)"),
    "driver": Flag(None, "target NVIDIA driver version (for hosts without a GPU; overrides facts)"),
    "arch": Flag(
        None, "target compute capability, e.g. 12.0 (for hosts without a GPU; overrides facts)"
    ),
    "recipe": Flag(None, "force this recipe (file stem under recipes/, e.g. r580)"),
    "break_lock": Flag(False, "take over the per-host lock even if another run holds it"),
    "package": Flag(None, "package name from the recipe (e.g. minikernel, flash-attn, sgl-kernel)"),
    "explain": Flag(False, "print the resolved build env, flags and the reason for each"),
    "rebuild": Flag(
        False,
        "build even when the installed wheel or a cached one has the key (replaces the "
        "cached wheel; for a wheel found bad by something the key does not cover)",
    ),
    "max_jobs": Flag(
        0, "override MAX_JOBS (parallel compile jobs) for this run", maximum=MAX_COUNT
    ),
    "nvcc_threads": Flag(
        0, "override NVCC_THREADS / SGL_KERNEL_COMPILE_THREADS for this run", maximum=MAX_COUNT
    ),
    "verbose": Flag(
        False,
        "list every command of every step (a lock's fetches one by one; --json has them all)",
    ),
    "recheck": Flag(False, "run the smoke checks even where a remembered verdict still applies"),
    "stack": Flag(
        False,
        "install the recipe's serving stack even where host var provision_stack is false "
        "(the stack is the default)",
    ),
    "engine": Flag(
        None,
        "the serving engine (sglang, vllm): its stack and its launches, over host/group var stack",
    ),
    "no_stack": Flag(
        False, "leave the serving stack alone: build only the packages named (--package, vars)"
    ),
    "no_system_python": Flag(
        False,
        "never install the distribution's Python as root for the stack (as host var "
        "allow_system_python: false): a host without a locked Python is refused instead",
    ),
    "top": Flag(None, "the top-level requirement to lock, pinned (e.g. sglang==0.5.23)"),
    "out": Flag(
        None, "lock file to write (default locks/<name>-<version>/pylock.cp<XY>-<platform>.toml)"
    ),
    "path": Flag(None, "the lock file to read"),
    "lock_dir": Flag(None, "a lock directory (locks/sglang-0.5.23) whose catalogue.toml to write"),
    "platform": Flag("manylinux_2_34_x86_64", "newest platform tag the lock accepts"),
    "index": Flag(
        None,
        "an index to resolve from, e.g. https://pypi.org/simple (default); give it more than "
        "once for more (a wheel stub's own index); the recipe's [stack] indexes are added",
    ),
    "constraint": Flag(
        None,
        "a version range the resolver must keep to, e.g. 'cuda-python>=13'; give it more than "
        "once for more; kept with the locks in their directory's constraints.txt",
    ),
    "lock_python": Flag(
        None,
        "Python X.Y to lock for, comma-separated (default: every X.Y the release has wheels for)",
    ),
    "python": Flag(None, "check this interpreter or venv instead of the recipe's managed env"),
    "url": Flag(
        "http://127.0.0.1:8000", "server URL as seen from the host, e.g. http://127.0.0.1:8000"
    ),
    "timeout": Flag(600.0, "seconds to wait for readiness", maximum=MAX_SECONDS),
    "pid": Flag(
        0,
        "the server's process id on the host (for the evidence when the port is not open)",
        maximum=MAX_PID,
    ),
    "process_match": Flag(
        None,
        "regex on the server's whole command line (default: a process whose program or "
        "Python module/script is sglang/vllm/uvicorn-like)",
    ),
    "strict": Flag(
        False,
        "fail the host when a check is unknown (a backend whose support for the GPU cannot be "
        "read, a hub model whose config is not at hand), not only warn",
    ),
    "stop_warm": Flag(
        False,
        "stop the host's warm resolution server(s) (sglang kept imported between preflights) "
        "and judge nothing; says 'no warm server' when none runs",
    ),
    "model_config": Flag(
        None,
        "for a hub model id: its config.json on this machine (or a directory holding it), "
        "which sglang's resolution on the host then reads",
    ),
    "launch": Flag(
        None,
        "the launch command as one string (python -m sglang.launch_server ARGS), "
        "instead of the words after --",
    ),
    # cache.*
    "older_than": Flag(
        0.0,
        "prune entries older than this many days (0: every entry)",
        maximum=MAX_SECONDS / 86400,
        optional=True,
    ),
    "keep": Flag(
        0,
        "prune all but the newest N entries per package (0: all of them)",
        maximum=1_000_000,
        optional=True,
    ),
    "max_size": Flag(
        None, "prune least recently used entries until the store is below this (e.g. 50G)"
    ),
    "store": Flag(None, "only this store (name from invoke.yaml's cache.stores, or 'local')"),
    "directory": Flag(None, "directory to export to / import from (usable with pip --find-links)"),
    # sources.*
    "mirror": Flag(None, "directory holding <dir>/ per source (default: setting sources_mirror)"),
    "refresh": Flag(
        False,
        "read stored sources again and replace those whose tree changed (a corrected or "
        "deliberately patched mirror still claims the same commit)",
    ),
}

#: The flags of every task that works on hosts.
COMMON = ("host", "inventory", "json", "forks", "accept_new_host_keys", "ask_pass")
#: The flags that pick a recipe without asking the host.
RECIPE = ("driver", "arch", "recipe")
#: `build` and `build-<package>`.
BUILD = (*COMMON, *RECIPE, "break_lock", "explain", "rebuild", "max_jobs", "nvcc_threads")


def helps(names: Iterable[str], overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Help texts for `names` (invoke wants exactly the task's own parameters)."""
    texts = {n: FLAGS[n].help for n in names}
    texts.update(overrides or {})
    return texts


def signature(fn: Callable[..., Any], names: Iterable[str]) -> inspect.Signature:
    """``fn(c, <names>=<defaults>)``: the signature invoke reads for a ``fn(c, **flags)`` body."""
    first = next(iter(inspect.signature(fn).parameters.values()))
    params = [first.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=FLAGS[n].default)
        for n in names
    ]
    return inspect.Signature(params)

"""The per-run flags a task hands its host ops, typed: one frozen value instead of string keys.

A task (tasks.py) builds it from its flags; `plan.prepare` puts it on each host's
`ProvisionState` (``state.flags``), where the ops read it. A task that builds nothing
(install-cuda, the env task) says so with ``builds=False`` (the toolkit then needs no
component a build would).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class RunFlags:
    """What a run was asked for beyond its hosts and recipe."""

    #: ``--explain``: record (and print after the run) every build setting with its reason.
    explain: bool = False
    #: ``--rebuild``: build even when the installed or a stored wheel has the key.
    rebuild: bool = False
    #: ``--max-jobs`` / ``--nvcc-threads``: 0 = not given (the host vars and sizing decide).
    max_jobs: int = 0
    nvcc_threads: int = 0
    #: ``--recheck``: smoke even where a remembered verdict still applies.
    recheck: bool = False
    #: False for a task that builds nothing.
    builds: bool = True
    #: ``--stack`` / ``--no-stack``: force the recipe's serving stack on or off (default: on,
    #: unless host var ``provision_stack: false``; sm120kit/stack/choice.py `provision_parts`).
    stack: bool = False
    no_stack: bool = False
    #: ``--no-system-python``: the python step refuses installing the distribution's Python as
    #: root (as host var ``allow_system_python: false``; sm120kit/python_choice.py).
    no_system_python: bool = False

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunFlags:
        """From ``{"max_jobs": 3, ...}``; a name that is no flag is a TypeError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unknown run flag(s) {unknown}; known: {sorted(known)}")
        return cls(**{k: v for k, v in values.items() if v is not None})


__all__ = ["RunFlags"]

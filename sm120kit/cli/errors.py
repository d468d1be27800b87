"""invoke's own input errors through the tool's error path: one line, one JSON document, exit 1.

Two kinds of bad input are seen by invoke before any task body runs, so `cli.guarded` never
sees them:

- its parser's errors (a flag the task lacks, a value missing after a flag, launch words
  without the ``--`` in front of them, taken for task names): invoke prints its message and
  exits 1, with no JSON under ``--json``;
- config files that do not merge (``sm120kit: 5`` in ``~/.invoke.yaml`` beside the project's
  mapping): invoke's ``merge_dicts`` raises AmbiguousMergeError, a traceback;
- config files that cannot be read (a YAML syntax error, a ``!!python`` tag, a list at the top:
  `config_files`).

`install` (called when tasks.py is loaded, before invoke parses the task's flags or loads the
project's config file) wraps the two invoke methods where these surface, so each becomes
`cli.fail`'s one line (and ``{"error": ..., "hosts": {}}`` under ``--json``), exit 1.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import invoke.config
import invoke.program
from invoke.exceptions import ParseError

from . import config_files
from . import core as cli

_INSTALLED: list[bool] = []


def json_wanted(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON: ``--json`` before any ``--``."""
    words = list(argv)
    if "--" in words:
        words = words[: words.index("--")]
    return "--json" in words


def parse_error_message(exc: BaseException) -> str:
    """invoke's parser error as the tool's one line (its text names the flag or word)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    missing = re.match(r"Flag <\w+: (\w+)[^>]*> needed value", text)
    if missing:
        return f"--{missing.group(1).replace('_', '-')}: needs a value"
    flag = re.match(r"No idea what '(-[^']*)' is!", text)
    if flag:
        return f"{flag.group(1)}: not a flag of this task (invoke TASK --help lists them)"
    if text.startswith("No idea what '") and not text.startswith("No idea what '-"):
        # A word taken for a task name: usually launch words written without `--`.
        text += " (not a task; launch words go after --, e.g. -- python -m sglang...)"
    return text


def merge_error_message(config: Any, exc: BaseException) -> str:
    """Which config file's ``sm120kit`` (or one of its sections) is not a mapping, from the
    levels invoke has loaded; invoke's own text when no such section is found."""
    for level in ("system", "user", "project", "runtime"):
        data = getattr(config, f"_{level}", None)
        if not isinstance(data, Mapping) or "sm120kit" not in data:
            continue
        path = getattr(config, f"_{level}_path", None) or f"{level} config file"
        section = data["sm120kit"]
        if section is not None and not isinstance(section, Mapping):
            return f"{path}: sm120kit: expected a mapping of settings, got {_show(section)}"
        for key, value in (section or {}).items():
            if key == "cache" and value is not None and not isinstance(value, Mapping):
                return f"setting {key} ({path}): expected a mapping, got {_show(value)}"
    return f"config files do not merge: {' '.join(str(exc).split())}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def install(argv: Sequence[str] | None = None) -> None:
    """Wrap invoke's Program.parse_tasks, Config._merge_file and its file loaders (once per
    process)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)

    words = sys.argv[1:] if argv is None else argv
    parse_tasks = invoke.program.Program.parse_tasks
    merge_file = invoke.config.Config._merge_file

    def checked_parse_tasks(self: Any) -> None:
        try:
            parse_tasks(self)
        except ParseError as exc:
            cli.fail(Exception(parse_error_message(exc)), json_wanted(words))

    def checked_merge_file(self: Any, name: str, desc: str) -> None:
        try:
            merge_file(self, name, desc)
        except invoke.config.AmbiguousMergeError as exc:
            cli.fail(Exception(merge_error_message(self, exc)), json_wanted(words))

    config_files.check(lambda exc: cli.fail(exc, json_wanted(words)))
    invoke.program.Program.parse_tasks = checked_parse_tasks  # type: ignore[method-assign]
    invoke.config.Config._merge_file = checked_merge_file  # type: ignore[method-assign]


__all__ = ["install", "json_wanted", "merge_error_message", "parse_error_message"]

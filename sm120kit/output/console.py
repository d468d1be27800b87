"""Consoles, the one JSON document on stdout, the one-line error, host-less documents."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..remote.lib.download import redact_text


def make_console(stderr: bool = False) -> Console:
    """A console; wide when not a terminal so CI logs keep table rows on one line."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=max(console.width, 160))
    return console


def print_json(doc: Mapping[str, Any]) -> None:
    """Write `doc` as the one JSON document on stdout (what --json promises)."""
    sys.stdout.write(redact_text(json.dumps(doc, default=str, sort_keys=False)) + "\n")
    sys.stdout.flush()


def print_error(message: str) -> None:
    """The one line a user-input error prints on stderr."""
    line = escape(redact_text(message))
    Console(stderr=True).print(f"[red]error:[/] {line}", highlight=False, soft_wrap=True)


def show_document(
    doc: dict[str, Any],
    json_output: bool,
    render: Callable[[Console, dict[str, Any]], None],
) -> None:
    """Print a host-less document (recipes catalog, cache listings): JSON or a table."""
    if json_output:
        print_json(doc)
    else:
        render(make_console(), doc)

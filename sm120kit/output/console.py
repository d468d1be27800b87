"""Consoles, the one JSON document on stdout, the one-line error, host-less documents."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any, cast

from rich.console import Console
from rich.markup import escape

from ..remote.lib.download import redact_text


class Redacting:
    """sys.stdout or sys.stderr (looked up at each write, as rich does itself), with the
    password of every URL written through it masked: an index URL with credentials may be
    in any message a console shows (plan, the live view, the recap)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr

    @property
    def _stream(self) -> Any:
        return sys.stderr if self._stderr else sys.stdout

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def redacting(stderr: bool) -> IO[str]:
    """A `Redacting` stream, typed as the text stream rich takes."""
    return cast(IO[str], Redacting(stderr))


def make_console(stderr: bool = False) -> Console:
    """A console; wide when not a terminal so CI logs keep table rows on one line. What it
    writes has every URL's password masked."""
    console = Console(file=redacting(stderr))
    if not console.is_terminal:
        console = Console(file=redacting(stderr), width=max(console.width, 160))
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

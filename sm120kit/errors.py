"""Error types. Every user-facing error renders as one line that names its source."""

from __future__ import annotations


class Sm120Error(Exception):
    """Base for errors caused by user input or host state; printed as one line, no traceback."""


class InventoryError(Sm120Error):
    """A malformed inventory or an unknown host pattern."""


class RecipeError(Sm120Error):
    """A malformed recipe, or no recipe fits a host."""


class PatchError(Sm120Error):
    """A patch that does not apply."""


class HostUnreachable(Sm120Error):
    """The host could not be reached (connect error, timeout, host key refused)."""


class ConnectionLost(HostUnreachable):
    """The connection dropped while a command ran on the host (its processes there were ended
    over a new connection where that was possible): a long idempotent step may run again."""


class HostFailed(Sm120Error):
    """A step on a host ran and failed."""


class ChecksFailed(HostFailed):
    """A smoke check ran to its end and judged the env bad (not a probe that could not run):
    a verdict that holds until something it depends on changes, so it may be remembered."""


class LockHeld(HostFailed):
    """Another run holds the per-host lock."""


class Interrupted(BaseException):  # noqa: N818 - a signal, not an error: like KeyboardInterrupt
    """The run was interrupted (SIGINT, SIGTERM, SIGHUP): hosts at work are marked
    `interrupted`. A BaseException, so `except Exception` in task code does not swallow it."""


def one_line(text: str) -> str:
    """An error message as one line: newlines and runs of blanks collapsed."""
    return " ".join(str(text).split())

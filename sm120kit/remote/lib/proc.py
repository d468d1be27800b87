"""Processes on the host: run a command, and the one-line failure a step reports."""

import subprocess


class StepFailed(Exception):
    """A step failed; the message is one line for the user, `tail` the log's last lines."""

    def __init__(self, message, tail=""):
        Exception.__init__(self, message)
        self.tail = tail


def tail_of(text, lines=15):
    """The last `lines` lines of `text`."""
    return "\n".join(text.strip().splitlines()[-lines:])


def run(argv, cwd=None, timeout=None, merge=True, env=None):
    """(exit code, stdout, stderr) of `argv`; stderr is merged into stdout when `merge`.

    A missing program or a timeout raises StepFailed. Output that is not UTF-8 (a compiler
    echoing a binary, a locale's quotes) is decoded with replacement characters, never an
    error; the child's stdin is empty (a remote script's own stdin held its program).
    """
    try:
        p = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
        )
    except FileNotFoundError:
        raise StepFailed("%s: not found" % argv[0]) from None
    except subprocess.TimeoutExpired:
        raise StepFailed("%s timed out after %ss" % (" ".join(argv[:4]), timeout)) from None
    return p.returncode, p.stdout, p.stderr or ""

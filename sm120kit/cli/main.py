"""The `sm120kit` command (and `python -m sm120kit.cli`): invoke's CLI with the tool's input checks
in place from the first line.

`invoke TASK` reads ``/etc/invoke.yaml`` and ``~/.invoke.yaml`` first of all (invoke 2.2.1,
invoke/program.py ``Program.run`` -> ``create_config`` -> ``Config()`` ->
``load_base_conf_files``), before it looks for tasks.py, so nothing of this project has run
when a broken one raises: under bare `invoke` that is still invoke's traceback. This entry point
installs the checks (`errors.install`) before invoke's Program starts, so every config file
defect is one line, exit 1. Tasks are found as invoke finds them (tasks.py from the working
directory up, or ``--search-root``): `sm120kit provision -H gpus` is `invoke provision -H gpus`.
"""

from __future__ import annotations

from invoke import Program

from .. import __version__
from ..runner.interrupts import install as install_interrupts
from . import errors


def main() -> None:
    """Run invoke's Program, as the `invoke` command does, after installing the checks."""
    install_interrupts()
    errors.install()
    Program(
        name="sm120kit", binary="sm120kit", binary_names=["sm120kit"], version=__version__
    ).run()


__all__ = ["main"]

"""Test venvs that see the suite's own packages (torch 2.13.0, pip, setuptools, ...).

``python -m venv --system-site-packages`` run from inside a venv makes a venv whose "system"
is the *base* interpreter: it sees the base interpreter's site-packages, not the running
venv's, so a suite started as ``PYTHON=<venv>/bin/python bash scripts/test.sh`` built envs
without its torch ("cannot locate torch's CMake files"). `make_venv` adds the running
interpreter's site-packages to the new venv with a ``.pth`` file in that case, so the new
venv sees exactly what the suite's interpreter sees, under the system interpreter and from a
venv alike.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def suite_site_dirs() -> list[str]:
    """The running interpreter's site-packages directories when it is a venv's (else none:
    ``--system-site-packages`` already reaches them)."""
    if sys.prefix == sys.base_prefix:
        return []
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def make_venv(path: Path, *, system_site_packages: bool = True, with_pip: bool = False) -> Path:
    """Create a venv at `path` (its python is returned). With `system_site_packages` it sees
    the suite's packages, whether the suite runs under the system interpreter or a venv's."""
    cmd = [sys.executable, "-m", "venv"]
    if system_site_packages:
        cmd.append("--system-site-packages")
    if not with_pip:
        cmd.append("--without-pip")
    subprocess.run([*cmd, str(path)], check=True, capture_output=True)
    python = path / "bin" / "python"
    extra = suite_site_dirs() if system_site_packages else []
    if extra:
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # A .pth line that is a directory is appended to sys.path: after the new venv's own
        # site-packages, before the base interpreter's.
        Path(purelib, "_sm120kit_suite_site.pth").write_text("\n".join(extra) + "\n")
    return python

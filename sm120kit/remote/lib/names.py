"""Names and constants both sides use, defined once: the controller imports this module, and the
hosts get it in the bundle of every script that imports it (as `arch` is shared).

- distribution names: `dist_name` (PEP 503: runs of ``-_.`` become ``-``, lower case, what
  ``packaging.utils.canonicalize_name`` gives) and `dist_stem` (the same with ``_``, as a
  ``.dist-info`` directory or a wheel file spells it);
- the files sm120kit leaves in an env or a wheel: `CUDA_HOME_PTH`, `INSTALL_RECORDS`,
  `PROVENANCE_FILE`, `STACK_RECORD`, `ENV_MARKER`; the default `DEFAULT_WORK_ROOT`; a CUDA
  toolkit's `CUDA_VERSION_JSON`;
- `cuda_xy`: a CUDA version's ``X.Y`` (``13.0`` of ``13.0.88``) on the host side; the
  controller's is `sm120kit.drivers.CudaVersion`.

tests/rules/test_shared_names.py keeps each of them defined here only.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import re
from typing import Optional

#: The serving env's .pth file that gives its JIT packages the toolkit step's CUDA_HOME
#: (written by remote/install_lock.py's ``pth`` step, planned by stack/stack_steps.py).
CUDA_HOME_PTH = "sm120kit_cuda_home.pth"
#: The line that .pth file holds, %-formatted with the CUDA_HOME path (``repr``-quoted).
CUDA_HOME_PTH_LINE = "import os; os.environ.setdefault('CUDA_HOME', %r)\n"
#: Under the managed env: ``<env>/.sm120kit/installed/<package>.json``, what the install step
#: put there (read by the install step and by remote/smoke_memo.py's fingerprint).
INSTALL_RECORDS = (".sm120kit", "installed")
#: The build record sm120kit writes into the dist-info of every wheel it builds.
PROVENANCE_FILE = "sm120kit-build.json"
#: The serving env's record of what it holds, by sha256, written once uv synced it.
STACK_RECORD = ".sm120kit-lock.json"
#: The managed (build) env's completeness marker, written last by remote/make_env.py.
ENV_MARKER = ".sm120kit-env.json"
#: Where the tool keeps its files on a host when host var ``work_root`` is unset.
DEFAULT_WORK_ROOT = "~/.sm120kit"
#: A CUDA toolkit's own record of its release and components, at its root (NVIDIA's name).
CUDA_VERSION_JSON = "version.json"

_SEPARATORS = re.compile(r"[-_.]+")
_CUDA_XY = re.compile(r"^\s*[vV]?(\d+)\.(\d+)")


def dist_name(name: str) -> str:
    """A distribution's normalised name (PEP 503): ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return _SEPARATORS.sub("-", str(name)).lower()


def dist_stem(name: str) -> str:
    """A distribution's name as a ``.dist-info`` directory or a wheel file spells it:
    ``foo-bar`` -> ``foo_bar``."""
    return _SEPARATORS.sub("_", str(name)).lower()


def install_record(env: str, package: str) -> str:
    """Where the install step records what it put into the managed env for `package`."""
    return "/".join((env.rstrip("/"),) + INSTALL_RECORDS + (package + ".json",))


def cuda_xy(version: object) -> Optional[str]:
    """``X.Y`` of a CUDA version (``13.0.88``, ``13.0``, ``V13.0.88``), or None when `version`
    does not start with one."""
    found = _CUDA_XY.match(str(version or ""))
    return "%s.%s" % (found.group(1), found.group(2)) if found else None

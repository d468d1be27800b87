"""Verify a released wheel for one target (driver and GPU arch) before it is trusted.

The controller-side front of `remote/lib/wheel_check.py`: it turns the target driver into the
newest CUDA it runs (NVIDIA's table in `drivers.py`) and the arch into a compute capability,
then reads the wheel. The verdict is the one smoke gives after install (same fatbin reader,
same arch rule).
"""

from __future__ import annotations

from typing import Any

from .. import drivers as drv
from ..errors import RecipeError
from ..remote.lib.cudaarch import parse_cc
from ..remote.lib.names import dist_name
from ..remote.lib.wheel_check import (
    judge_wheel,
    loaded_modules,
    share_nvcc,
    verify_locked_wheel,
    verify_wheel,
)
from .catalogue import Catalogue


def driver_cuda(driver: str) -> str:
    """``"12.8"`` for driver 570.124.06: the newest CUDA X.Y the driver runs."""
    newest = drv.newest_toolkit_for(driver)
    if newest is None:
        raise RecipeError(f"driver {driver} runs no CUDA toolkit sm120kit knows (need >= 570.26)")
    return drv.cuda_major_minor(newest)


def _target(driver: str, arch: str) -> tuple[tuple[int, int], str]:
    """The compute capability of `arch` and the CUDA release `driver` runs; RecipeError for
    an arch it cannot read (`driver_cuda` raises its own for the driver)."""
    try:
        cc = parse_cc(arch)
    except ValueError:
        cc = None
    if cc is None:
        raise RecipeError(f"arch {arch!r} is not a compute capability such as 12.0")
    return cc, driver_cuda(driver)


def verify_release(
    path: str,
    *,
    sha256: str,
    driver: str,
    arch: str,
    loaded: list[str],
    not_for_arch: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The verdict on the wheel at `path` for a GPU of `arch` ("12.0") behind `driver`:
    ``{"ok", "refusal", "modules", "notes", "sha256", "driver_cuda", "arch"}`` (see
    `wheel_check.verify_wheel`). Raises RecipeError for an arch or driver it cannot read."""
    cc, cuda = _target(driver, arch)
    doc = verify_wheel(
        path,
        sha256=sha256,
        cc=cc,
        driver=driver,
        driver_cuda=cuda,
        loaded=loaded,
        not_for_arch=dict(not_for_arch or {}),
    )
    return {**doc, "driver_cuda": cuda, "arch": arch}


def verify_locked(
    path: str,
    *,
    sha256: str,
    driver: str,
    arch: str,
    python: str,
    not_for_arch: dict[str, str] | None = None,
    variants: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`verify_release` for a lock's entry: the modules judged are those the package's loader
    picks on `arch` under Python `python` (`wheel_check.loaded_modules`; `variants`: its
    per-arch directories, from the recipe's ``stack.loaders``)."""
    cc, cuda = _target(driver, arch)
    doc = verify_locked_wheel(
        path,
        sha256=sha256,
        cc=cc,
        driver=driver,
        driver_cuda=cuda,
        python=python,
        not_for_arch=dict(not_for_arch or {}),
        variants=variants,
    )
    return {**doc, "driver_cuda": cuda, "arch": arch}


def verdict_line(doc: dict[str, Any]) -> str:
    """``ok`` or ``refused: <one line>``, as a lock and plan record a verification."""
    return "ok" if doc.get("ok") else f"refused: {doc.get('refusal')}"


def catalogue_verdict(
    cat: Catalogue, name: str, sha256: str, target: dict[str, Any]
) -> dict[str, Any] | None:
    """The verdict on the locked file of `sha256` for `target` (plays/stack.py's ``_target``:
    cc, driver, driver_cuda, python, not_for_arch, loaders) judged from `cat`, the facts the
    catalogue read from this very file (same reader, same rule as `verify_wheel` on the
    host), or None when the catalogue did not read it. The host still checks the file's
    sha256, so what is judged is what is installed; a file the catalogue lacks is read on the
    host as before."""
    found = cat.by_sha256(sha256)
    if found is None or not target.get("cc") or not target.get("driver"):
        return None
    _rel, wheel = found
    modules = share_nvcc(
        [
            {"module": m.path, "error": m.error}
            if m.error
            else {
                "module": m.path,
                "sass": list(m.sass),
                "ptx": list(m.ptx),
                "cudart": m.cudart,
                "nvcc": m.nvcc,
            }
            for m in wheel.modules
        ]
    )
    cc = (int(target["cc"][0]), int(target["cc"][1]))
    variants = (target.get("loaders") or {}).get(dist_name(name))
    loaded = loaded_modules([m.path for m in wheel.modules], cc, target["python"], variants)
    doc = judge_wheel(
        modules,
        sha256=sha256,
        cc=cc,
        driver=target["driver"],
        driver_cuda=target["driver_cuda"],
        loaded=loaded,
        not_for_arch=target.get("not_for_arch") or {},
    )
    return {k: doc[k] for k in ("ok", "refusal", "notes")}

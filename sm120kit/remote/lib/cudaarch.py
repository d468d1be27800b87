"""Compute capabilities and device-code targets: whether ``sm_120a`` SASS or ``compute_120``
PTX runs on a GPU of capability X.Y, and the arch verdict for an extension.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

from typing import Any

from sm120kit.remote.lib.arch import Arch


def target_key(target: str) -> tuple[int, str]:
    """Sort key of a device-code target: ``sm_120a`` -> (120, "a")."""
    if target.startswith(("sm_", "compute_")):
        try:
            arch = Arch.parse(target)
        except ValueError:
            pass
        else:
            return arch.sm, arch.suffix
    return 0, target


def parse_cc(value: Any) -> tuple[int, int] | None:
    """A compute capability from "12.0", "120", "sm_120", 12.0 or [12, 0] (any spelling `Arch`
    takes); None when absent."""
    if value is None or value == "":
        return None
    return Arch.parse(value).cc


def cc_text(cc: tuple[int, int]) -> str:
    """12.0 style."""
    return f"{cc[0]}.{cc[1]}"


def split_target(target: str) -> tuple[int, int, str]:
    """'sm_120a' -> (12, 0, 'a'); 'compute_86' -> (8, 6, '')."""
    sm, variant = target_key(target)
    return sm // 10, sm % 10, variant


def sass_runs_on(target: str, cc: tuple[int, int]) -> bool:
    """SASS for sm_XY runs on the same major with minor >= Y; `a` SASS only on exactly X.Y.

    `f` (family) SASS runs on the family members: same major, minor >= Y (sm_120f: 12.0, 12.1).
    """
    major, minor, variant = split_target(target)
    if variant == "a":
        return (major, minor) == cc
    return major == cc[0] and cc[1] >= minor


def ptx_jits_on(target: str, cc: tuple[int, int]) -> bool:
    """PTX compute_XY JITs on any cc >= X.Y; `a` PTX only on X.Y, `f` PTX within the family."""
    major, minor, variant = split_target(target)
    if variant == "a":
        return (major, minor) == cc
    if variant == "f":
        return major == cc[0] and cc[1] >= minor
    return cc >= (major, minor)


def arch_verdict(sass: list[str], ptx: list[str], cc: tuple[int, int]) -> tuple[str, str]:
    """(status, one-line reason) for device code ``sass``/``ptx`` on a GPU of capability ``cc``."""
    where = cc_text(cc)
    if not sass and not ptx:
        return "skip", "no device code"
    runs = [t for t in sass if sass_runs_on(t, cc)]
    if runs:
        return "pass", "SASS {} runs on {}".format(", ".join(runs), where)
    jit = [t for t in ptx if ptx_jits_on(t, cc)]
    have = ", ".join(sass + ptx)
    if jit:
        return (
            "warn",
            "only PTX {} for {} (has {}): JIT on first run costs time and needs a new enough driver".format(
                ", ".join(jit),
                where,
                have,
            ),
        )
    return (
        "fail",
        f"no SASS or PTX usable on {where} (has {have}): 'no kernel image is available for execution on the device' predicted",
    )

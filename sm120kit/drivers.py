"""NVIDIA's driver/toolkit table (docs/stack-facts.md section 1) as data, plus helpers over it.

Driver versions such as ``570.86.10``, ``580.95.05`` or ``470.82.01`` are compared numerically
component by component (``packaging.version.Version``), so ``570.26 < 570.86.10 < 570.124.06``.

The minimum drivers are NVIDIA's own table for Linux x86_64. 12.x toolkits also run on drivers
>= 525 through minor-version compatibility, but only with SASS for the GPU (no PTX JIT from a
newer toolkit), so recipe selection uses the strict table; `MINOR_COMPAT_MIN_DRIVER` records the
looser floor for diagnostics only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from packaging.version import InvalidVersion, Version

#: Toolkit -> minimum driver, ascending by toolkit (NVIDIA's table, docs/stack-facts.md section 1).
TOOLKIT_MIN_DRIVER: Mapping[str, str] = MappingProxyType(
    {
        "12.8.0": "570.26",
        "12.8.1": "570.124.06",
        "12.9.0": "575.51.03",
        "12.9.1": "575.57.08",
        "13.0.0": "580.65.06",
        "13.0.1": "580.82.07",
        "13.0.2": "580.95.05",
        "13.1.0": "590.44.01",
        "13.1.1": "590.48.01",
        "13.2.0": "595.45.04",
        "13.2.1": "595.58.03",
        "13.2.2": "595.71.05",
    }
)

#: Driver bundled in a toolkit's runfile, where docs/stack-facts.md section 1 names it. The runfile is named after it
#: (``cuda_<toolkit>_<driver>_linux.run``). 12.8 GA bundles a newer driver than its minimum.
#: Toolkits missing here need an explicit ``runfile`` in the recipe.
RUNFILE_BUNDLED_DRIVER: Mapping[str, str] = MappingProxyType(
    {
        "12.8.0": "570.86.10",
        "12.8.1": "570.124.06",
        "12.9.1": "575.57.08",
        "13.0.2": "580.95.05",
        "13.1.1": "590.48.01",
    }
)

#: Where runfiles live: ``<mirror>/<X.Y.Z>/local_installers/<runfile>``.
DEFAULT_MIRROR = "https://developer.download.nvidia.com/compute/cuda"

#: Oldest driver that can run SM120 code at all (R570 with the open kernel modules).
SM120_MIN_DRIVER = "570.26"
#: Oldest toolkit whose nvcc can compile for sm_120.
SM120_MIN_TOOLKIT = "12.8.0"

#: CUDA major -> oldest driver for minor-version compatibility (SASS only; 13.x has none below 580).
MINOR_COMPAT_MIN_DRIVER: Mapping[int, str] = MappingProxyType({12: "525", 13: "580"})

#: Host GCC ceiling enforced by nvcc's crt/host_config.h, by toolkit major.minor ("13" = all 13.x).
GCC_CEILING: Mapping[str, int] = MappingProxyType({"12.8": 14, "12.9": 14, "13": 15})

_DRIVER_RE = re.compile(r"^\d+(\.\d+)*$")


def parse_driver_version(text: object) -> Version:
    """Parse a driver version like ``580.95.05``; raise ValueError on anything else.

    Only dotted digits are accepted: ``Version`` alone would also take ``1.0rc1`` or ``v570``,
    which no driver prints.
    """
    s = str(text).strip()
    if not _DRIVER_RE.match(s):
        raise ValueError(
            f"not a driver version: {text!r} (expected digits and dots, e.g. 580.95.05)"
        )
    return Version(s)


def format_driver(version: Version) -> str:
    """NVIDIA's spelling of a parsed driver version: ``580.95.5`` -> ``580.95.05``."""
    head, *rest = version.release
    return ".".join([str(head), *(f"{part:02d}" for part in rest)])


def parse_toolkit_version(text: object) -> Version:
    """Parse a toolkit version (``13.0.2``, or ``12.8`` meaning ``12.8.0``); ValueError if unknown."""
    s = str(text).strip()
    try:
        v = Version(s)
    except InvalidVersion:
        raise ValueError(f"not a CUDA toolkit version: {text!r}") from None
    if _key(v) is None:
        raise ValueError(
            f"unknown CUDA toolkit {s} (known: {', '.join(TOOLKIT_MIN_DRIVER)}; SM120 needs >= 12.8)"
        )
    return v


def _key(v: Version) -> str | None:
    for name in TOOLKIT_MIN_DRIVER:
        if Version(name) == v:
            return name
    return None


def canonical_toolkit(toolkit: object) -> str:
    """Return the table's spelling of a toolkit version (``12.8`` -> ``12.8.0``)."""
    key = _key(parse_toolkit_version(toolkit))
    assert key is not None  # parse_toolkit_version raised otherwise
    return key


def known_toolkits() -> list[str]:
    """All toolkits in the table, oldest first."""
    return list(TOOLKIT_MIN_DRIVER)


def min_driver(toolkit: object) -> str:
    """Minimum driver (NVIDIA's table) for `toolkit`; ValueError for a toolkit not in the table."""
    return TOOLKIT_MIN_DRIVER[canonical_toolkit(toolkit)]


def toolkit_can_run(toolkit: object, driver: object) -> bool:
    """True when `driver` meets `toolkit`'s minimum in NVIDIA's table."""
    return parse_driver_version(driver) >= parse_driver_version(min_driver(toolkit))


def newest_toolkit_for(driver: object, major_minor: str | None = None) -> str | None:
    """Newest toolkit in the table that `driver` can run, optionally within ``X.Y``; None if none."""
    d = parse_driver_version(driver)
    best: str | None = None
    for toolkit, minimum in TOOLKIT_MIN_DRIVER.items():
        if major_minor is not None and cuda_major_minor(toolkit) != major_minor:
            continue
        if d >= parse_driver_version(minimum):
            best = toolkit  # the table is ascending, so the last fit is the newest
    return best


def supports_sm120(driver: object) -> bool:
    """True when `driver` is new enough to run SM120 code (>= 570.26)."""
    return parse_driver_version(driver) >= parse_driver_version(SM120_MIN_DRIVER)


@dataclass(frozen=True)
class CudaVersion:
    """A CUDA toolkit version (``13.0.2``, ``12.8``) as written, with its parts: the one place
    the toolkit's ``X.Y`` release (``13.0``: what apt package names, ``/usr/local/cuda-X.Y``,
    a torch build's ``cuXY`` and nvcc's own ``release`` line use) is cut from it."""

    text: str
    major: int
    minor: int

    @classmethod
    def parse(cls, value: object) -> CudaVersion:
        """Any X[.Y[.Z]] version; InvalidVersion (a ValueError) naming it otherwise."""
        if isinstance(value, CudaVersion):
            return value
        release = Version(str(value)).release
        return cls(str(value), release[0], release[1] if len(release) > 1 else 0)

    @classmethod
    def from_cu(cls, tag: str) -> CudaVersion:
        """The release a torch index or wheel tag names: ``cu130`` (or ``130``) -> ``13.0``."""
        digits = tag[2:] if tag.startswith("cu") else tag
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"not a CUDA tag like cu130: {tag!r}")
        return cls(f"{int(digits[:-1])}.{digits[-1]}", int(digits[:-1]), int(digits[-1]))

    @property
    def xy(self) -> str:
        """The ``X.Y`` release: ``13.0`` for ``13.0.2``."""
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return self.text


def cuda_major(toolkit: object) -> int:
    """Major version of a toolkit version string (``13.0.2`` -> 13); any X.Y[.Z] is accepted."""
    return CudaVersion.parse(toolkit).major


def cuda_major_minor(toolkit: object) -> str:
    """``X.Y`` of a toolkit version string (``13.0.2`` -> ``13.0``): `CudaVersion.xy`."""
    return CudaVersion.parse(toolkit).xy


def gcc_max(toolkit: object) -> int:
    """Newest GCC major nvcc of `toolkit` accepts without ``-allow-unsupported-compiler``."""
    mm = cuda_major_minor(canonical_toolkit(toolkit))
    if mm in GCC_CEILING:
        return GCC_CEILING[mm]
    return GCC_CEILING[mm.split(".")[0]]


def runfile_name(toolkit: object) -> str | None:
    """Runfile name for `toolkit` when docs/stack-facts.md section 1 names its bundled driver, else None."""
    key = canonical_toolkit(toolkit)
    driver = RUNFILE_BUNDLED_DRIVER.get(key)
    return f"cuda_{key}_{driver}_linux.run" if driver else None


def runfile_url(toolkit: object, runfile: str, mirror: str = DEFAULT_MIRROR) -> str:
    """Download URL of `runfile` for `toolkit` under `mirror` (NVIDIA's layout)."""
    return f"{mirror.rstrip('/')}/{canonical_toolkit(toolkit)}/local_installers/{runfile}"


def pip_packages(toolkit: object) -> list[str]:
    """PyPI requirements giving a usable CUDA_HOME for `toolkit` (13.x only).

    They pin major.minor: PyPI versions these packages by component, not by toolkit update.
    The CUDA 12 packages ship only ptxas, not nvcc, so 12.x has no pip route (ValueError).
    """
    key = canonical_toolkit(toolkit)
    if cuda_major(key) < 13:
        raise ValueError(f"CUDA {key} has no pip route: nvidia-cuda-nvcc-cu12 ships no nvcc")
    mm = cuda_major_minor(key)
    return [
        f"{name}=={mm}.*"
        for name in ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-cccl")
    ]


def apt_packages(toolkit: object) -> list[str]:
    """Minimal apt packages (NVIDIA's cuda-keyring repo) for an nvcc of `toolkit`'s X.Y."""
    mm = cuda_major_minor(canonical_toolkit(toolkit)).replace(".", "-")
    return [f"cuda-nvcc-{mm}", f"cuda-cudart-dev-{mm}", f"cuda-cccl-{mm}"]


#: NVIDIA's apt package of each toolkit library (sm120kit/builds/cuda_libraries.py), by component;
#: ``{mm}`` is the release with a dash (``13-0``), as in NVIDIA's repo (libcublas-dev-13-0).
APT_LIBRARY_PACKAGES = {
    "cublas": "libcublas-dev-{mm}",
    "cusparse": "libcusparse-dev-{mm}",
    "cusolver": "libcusolver-dev-{mm}",
    "curand": "libcurand-dev-{mm}",
    "nvrtc": "cuda-nvrtc-dev-{mm}",
}


def apt_library_packages(release: str, components: Iterable[str]) -> list[str]:
    """NVIDIA's apt packages for `components` of CUDA `release` (``13.0``)."""
    mm = release.replace(".", "-")
    return [APT_LIBRARY_PACKAGES[c].format(mm=mm) for c in components]

"""Which CUDA toolkit serves a recipe: the spec it asks for (`ToolkitSpec`), the matching rule
over the toolkits the facts found (`toolkit_mismatch`, `find_toolkit`), and the host compiler
nvcc may use (`host_compiler_problem`). Pure functions of the recipe and the facts; the module
docstring of `sm120kit.ops.toolkit` states the rule.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .. import drivers as drv
from ..builds import cuda_libraries as cudalibs
from ..remote.lib.arch import Arch
from ..state import ProvisionState, Toolkit
from ..validate import check_pip_args

#: Toolkit release -> the nvcc version it ships (``nvcc --version``'s ``V...``, also the
#: nvidia-cuda-nvcc wheel's version). Releases missing here are matched by major.minor only.
NVCC_VERSIONS: Mapping[str, str] = MappingProxyType(
    {
        "12.8.0": "12.8.61",
        "12.8.1": "12.8.93",
        "12.9.0": "12.9.41",
        "12.9.1": "12.9.86",
        "13.0.0": "13.0.48",
        "13.0.1": "13.0.88",
        "13.0.2": "13.0.88",
        "13.1.0": "13.1.80",
        "13.1.1": "13.1.115",
    }
)


#: CUDA 12.8/12.9 headers declare cospi/sinpi/rsqrt that glibc >= 2.41 declares too.
GLIBC_CLASH = (2, 41)


GLIBC_CLASH_RELEASES = ("12.8", "12.9")


SOURCE_RANK = {"work_root": 0, "system": 1, "CUDA_HOME": 2, "CUDA_PATH": 2, "PATH": 3}


def expected_nvcc(toolkit: str) -> str | None:
    """The nvcc version `toolkit` ships, when known (``13.0.2`` -> ``13.0.88``)."""
    try:
        return NVCC_VERSIONS.get(drv.canonical_toolkit(toolkit))
    except ValueError:
        return None


def releases_for_nvcc(nvcc_version: str | None) -> list[str]:
    """Toolkit releases shipping `nvcc_version`, oldest first (``13.0.88`` -> 13.0.1, 13.0.2)."""
    return [t for t, v in NVCC_VERSIONS.items() if v == nvcc_version]


def sm_code(arch: str) -> str:
    """``12.0`` -> ``sm_120``; ``12.0a`` -> ``sm_120a``; ``12.0+PTX`` -> ``sm_120``."""
    return Arch.parse(arch).sm_code


def pip_args(host_vars: Mapping[str, Any]) -> list[str]:
    """Extra arguments for every pip install on a host, from its vars.

    ``pip_cache_dir`` becomes ``--cache-dir DIR`` (default: pip's own cache); ``pip_args`` (a
    list, or a string split like a shell would) is appended as is, e.g. ``["--find-links",
    "/opt/wheels"]`` for a local wheelhouse or ``["--proxy", "http://proxy:3128"]``.
    """
    out: list[str] = []
    cache = host_vars.get("pip_cache_dir")
    if cache:
        out += ["--cache-dir", str(cache)]
    extra = host_vars.get("pip_args")
    if isinstance(extra, str):
        out += check_pip_args(extra)
    elif isinstance(extra, list):
        out += [str(a) for a in extra]
    return out


@dataclass(frozen=True)
class ToolkitSpec:
    """What the recipe asks for, with where it would go on this host."""

    version: str
    release: str
    method: str
    prefix: str
    nvcc_version: str | None
    arch: tuple[str, ...]
    gcc_max: int
    gcc_max_source: str
    pip_packages: tuple[str, ...]
    url: str
    sha256: str
    sha256_source: str
    runfile: str
    apt_packages: tuple[str, ...]
    mirror: str
    work_root: str
    #: Toolkit libraries the packages of this run need (sm120kit/builds/cuda_libraries.py), and those
    #: packages: a toolkit without them does not serve, and the pip/apt routes add them.
    components: tuple[str, ...] = ()
    components_for: tuple[str, ...] = ()

    @classmethod
    def from_state(cls, state: ProvisionState) -> ToolkitSpec:
        cuda, src = state.resolved.cuda, state.resolved.sources
        version, release, method = str(cuda.version), cuda.version.xy, cuda.method
        prefix = f"/usr/local/cuda-{release}" if method == "apt" else state.paths.toolkit(version)
        users = component_users(state)
        descs = [state.resolved.descriptor(p) for p in users]
        apt = cuda.apt_packages
        components = cudalibs.needed(descs)
        if method == "apt" and components:
            apt += tuple(drv.apt_library_packages(release, components))
        return cls(
            version=version,
            release=release,
            method=method,
            prefix=prefix,
            nvcc_version=expected_nvcc(version),
            arch=tuple(state.arch_list),
            gcc_max=cuda.gcc_max,
            gcc_max_source=src.get("cuda.gcc_max", "?"),
            pip_packages=cuda.pip_packages,
            url=cuda.url,
            sha256=cuda.sha256,
            sha256_source=src.get("cuda.sha256", "?"),
            runfile=cuda.runfile,
            apt_packages=apt,
            mirror=cuda.mirror or drv.DEFAULT_MIRROR,
            work_root=state.paths.work_root,
            components=components,
            components_for=tuple(p for p, d in zip(users, descs, strict=True) if d.cuda_libraries),
        )

    @property
    def needs(self) -> str:
        """What this run asks of a toolkit, and why (plan's reason line)."""
        if self.components:
            return (
                f"needs nvcc, CUDA headers and {cudalibs.describe(self.components)} (the "
                f"{', '.join(self.components_for)} build)"
            )
        return "needs nvcc and CUDA headers only (no build of this run links its libraries)"

    @property
    def major(self) -> int:
        return drv.cuda_major(self.version)


def component_users(state: ProvisionState) -> list[str]:
    """The packages of this run that build against a CUDA torch (the only builds that read
    ATen's CUDA headers or link the toolkit's libraries): ``--package``, else the host's
    ``provision_packages``, and the serving stack's own builds; none when the recipe's torch is a CPU build, and
    none for a run that builds nothing (``install-cuda``: the first build that needs the
    libraries adds them)."""
    if not state.flags.builds:
        return []
    if state.resolved.torch.is_cpu:
        return []
    names = list(dict.fromkeys([*state.run_packages(), *state.stack_builds]))
    packages = state.resolved.packages
    return [p for p in names if p not in packages or packages[p].needs_cuda_torch]


def _exact_releases(entry: Mapping[str, Any]) -> list[str]:
    version = str(entry.get("version") or "")
    if version in drv.TOOLKIT_MIN_DRIVER:
        return [version]
    return releases_for_nvcc(entry.get("nvcc_version"))


def _entry_release(entry: Mapping[str, Any]) -> str | None:
    if entry.get("nvcc_release"):
        return str(entry["nvcc_release"])
    try:
        return drv.cuda_major_minor(entry.get("version"))
    except Exception:
        return None


def toolkit_mismatch(entry: Mapping[str, Any], spec: ToolkitSpec, driver: str | None) -> str | None:
    """Why a facts["cuda"] entry cannot serve `spec` on `driver`; None when it can."""
    if not entry.get("nvcc"):
        return "no nvcc"
    release = _entry_release(entry)
    if release != spec.release:
        return f"CUDA {release}, not {spec.release}"
    if driver:
        exact = _exact_releases(entry)
        oldest = exact[0] if exact else None
        if oldest is None:
            ga = f"{release}.0"
            oldest = ga if ga in drv.TOOLKIT_MIN_DRIVER else None
        if oldest is not None and not drv.toolkit_can_run(oldest, driver):
            return f"CUDA {oldest} needs driver >= {drv.min_driver(oldest)}, the target is {driver}"
    return missing_components(entry, spec)


def missing_components(entry: Mapping[str, Any], spec: ToolkitSpec) -> str | None:
    """Which of the libraries `spec` needs a facts["cuda"] entry lacks, for people."""
    have = set(entry.get("components") or ())
    missing = [c for c in spec.components if c not in have]
    if not missing:
        return None
    return (
        f"lacks {cudalibs.describe(missing)} (headers/libraries the "
        f"{', '.join(spec.components_for)} build needs)"
    )


def find_toolkit(
    facts: Mapping[str, Any], spec: ToolkitSpec, driver: str | None
) -> tuple[Toolkit | None, list[str]]:
    """The best toolkit of the host's facts for `spec`, and why each other one was passed over."""
    matches: list[Mapping[str, Any]] = []
    rejected: list[str] = []
    for entry in facts.get("cuda") or []:
        why = toolkit_mismatch(entry, spec, driver)
        if why:
            rejected.append(f"{entry.get('version')} at {entry.get('path')}: {why}")
        else:
            matches.append(entry)
    if not matches:
        return None, rejected

    def rank(e: Mapping[str, Any]) -> tuple[int, int, int, str]:
        return (
            0 if spec.version in _exact_releases(e) else 1,
            0 if spec.nvcc_version and e.get("nvcc_version") == spec.nvcc_version else 1,
            SOURCE_RANK.get(str(e.get("source")), 4),
            str(e.get("path")),
        )

    best = sorted(matches, key=rank)[0]
    return (
        Toolkit(
            version=str(best.get("version") or best.get("nvcc_version")),
            release=spec.release,
            nvcc_version=best.get("nvcc_version"),
            cuda_home=str(best["path"]),
            nvcc=str(best["nvcc"]),
            source=str(best.get("source") or "unknown"),
        ),
        rejected,
    )


def _major(version: str) -> int:
    return int(str(version).split(".")[0])


def _gcc_name(path: str) -> str:
    return posixpath.basename(path).replace("g++", "gcc")


def choose_compiler(facts: Mapping[str, Any], ccbin: str | None) -> dict[str, Any] | None:
    """The facts["gcc"] entry nvcc will use: host var nvcc_ccbin's, else plain ``gcc``."""
    gccs = list(facts.get("gcc") or [])
    if ccbin:
        # The very path, or its gcc sibling in the same directory (g++-14 -> gcc-14); never a
        # basename match elsewhere, which would take /nonexistent/gcc for the PATH's gcc.
        # check_host_compiler puts the compiler's real version (from running it) in facts.
        sibling = posixpath.join(posixpath.dirname(ccbin), _gcc_name(ccbin))
        for path in (ccbin, sibling):
            for g in gccs:
                if g["path"] == path:
                    return dict(g)
        return None
    for g in gccs:
        if posixpath.basename(g["path"]) == "gcc":
            return dict(g)
    return dict(gccs[0]) if gccs else None


def _glibc(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in str(text).split(".")[:2])
    except ValueError:
        return None


def host_compiler_problem(
    facts: Mapping[str, Any], spec: ToolkitSpec, ccbin: str | None = None
) -> tuple[str, str | None]:
    """(what nvcc will compile host code with, the problem with it or None)."""
    gccs = list(facts.get("gcc") or [])
    found = ", ".join(f"{g['path']} ({g['version']})" for g in gccs) or "none"
    chosen = choose_compiler(facts, ccbin)
    if chosen is None:
        if ccbin:
            return (
                "",
                f"host var nvcc_ccbin {ccbin} is not a gcc on the host's PATH (found: {found})",
            )
        return "", (
            f"no gcc on the host's PATH: nvcc needs a host compiler; install gcc and g++ "
            f"<= {spec.gcc_max} (e.g. apt install g++-{spec.gcc_max})"
        )
    what = f"{chosen['path']} (GCC {chosen['version']})"
    major = _major(chosen["version"])
    if major > spec.gcc_max:
        fits = [g for g in gccs if _major(g["version"]) <= spec.gcc_max]
        if fits:
            best = max(fits, key=lambda g: _major(g["version"]))
            fix = (
                f"set host var nvcc_ccbin: {best['path']} (GCC {best['version']}; nvcc -ccbin, "
                f"like NVCC_CCBIN={best['path'].replace('gcc', 'g++')})"
            )
        else:
            n = spec.gcc_max
            fix = (
                f"install gcc-{n} and g++-{n} (e.g. apt install g++-{n}) and set host var "
                f"nvcc_ccbin: /usr/bin/gcc-{n} (nvcc -ccbin, like NVCC_CCBIN=g++-{n}), or pass "
                "-allow-unsupported-compiler to nvcc at your own risk"
            )
        return what, (
            f"host compiler {what} is above CUDA {spec.version}'s ceiling GCC {spec.gcc_max} "
            f"(cuda.gcc_max from {spec.gcc_max_source}); fix: {fix}"
        )
    glibc = _glibc(facts.get("glibc"))
    if spec.release in GLIBC_CLASH_RELEASES and glibc is not None and glibc >= GLIBC_CLASH:
        return what, (
            f"glibc {facts.get('glibc')} clashes with CUDA {spec.release}'s headers (cospi/sinpi "
            "are declared by both, so every .cu file fails to compile); fix: use a CUDA 13 "
            "toolkit (driver >= 580, recipe r580 or newer) or a host with glibc < 2.41"
        )
    return what, None

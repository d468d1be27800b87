"""A CMake-built package's host prerequisites and its real configure, before a build starts
(the packages whose descriptor sets ``cmake_checked``).

- step ``prereqs:<pkg>`` (run by `sm120kit/ops/prerequisites.py`): the libnuma headers/library (mscclpp's ``find_package(NUMA
  REQUIRED)``) and a ``libcuda.so`` for ``CUDA::cuda_driver`` (mscclpp links it; the toolkit's
  ``lib64/stubs`` stub is enough). Missing ones stop the run with their names, in plan too.
  A missing libnuma is installed by the Steps of `numa_steps` (a pure planner).
- `configure_steps` (a pure planner: what plan shows for the build is what runs; the build
  runs it, `sm120kit/ops/compile.py::configure_targets`): ``cmake -S <tree> -B <scratch>`` with the exact defines the wheel build passes
  through scikit-build-core (plus what scikit-build-core adds itself, and, with a CPU torch,
  what a CUDA torch would have defined), then the compile commands per target
  (``remote/cmake_probe.py``). `require_arch` refuses a build whose main targets carry no code
  for the recipe's arch.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from ..drivers import CudaVersion
from ..errors import HostFailed
from ..recipes.resolved import PackageValues
from ..state import ProvisionState
from ..steps import Step
from . import cmake_defines
from . import sources as srcstore
from .knobs import Knobs, parse_arch_list


def cmake_checked(pkg: PackageValues) -> bool:
    """Whether resolved package `pkg` gets these checks: its descriptor asks for them and it is
    built from the tool's own sources (its recipe lists the FetchContent dependencies, so the
    tree is upstream's CMake build). Asked once per build (`plays/build.py::ensure_package`),
    which hands the answer to the steps that act on it."""
    return pkg.descriptor.cmake_checked and srcstore.is_managed(pkg)


def numa_hint(name: str) -> str:
    """What a missing libnuma is, how to install it, and why package `name` needs it."""
    return (
        "the libnuma headers and library (Debian/Ubuntu: apt-get install libnuma-dev; "
        f"RHEL/Fedora: dnf install numactl-devel): mscclpp, built into {name}, runs "
        "find_package(NUMA REQUIRED)"
    )


#: os-release IDs whose package manager the tool drives for a missing prerequisite.
APT_IDS = frozenset({"debian", "ubuntu", "linuxmint", "pop"})
DNF_IDS = frozenset({"rhel", "fedora", "rocky", "almalinux", "centos", "ol", "amzn"})


def numa_install_commands(facts: dict[str, Any], sudo: str) -> tuple[str, list[str]] | None:
    """(package, commands) installing the libnuma headers on this host's distro, or None when
    the tool does not know its package manager."""
    os_id = str((facts.get("os") or {}).get("id") or "")
    if os_id in APT_IDS:
        apt = f"{sudo}env DEBIAN_FRONTEND=noninteractive apt-get"
        return "libnuma-dev", [
            f"{apt} update -qq",
            f"{apt} install -y --no-install-recommends libnuma-dev",
        ]
    if os_id in DNF_IDS:
        return "numactl-devel", [f"{sudo}dnf install -y numactl-devel"]
    return None


def numa_steps(
    facts: dict[str, Any], host_vars: Mapping[str, Any], sudo: str
) -> tuple[str, list[Step]] | None:
    """The libnuma install as Steps (a pure planner: facts and host vars in): (package, one
    ``run`` Step per command), or None when the tool may not install it (host var
    ``install_prerequisites: false``) or does not know the host's package manager."""
    if host_vars.get("install_prerequisites") is False:
        return None
    planned = numa_install_commands(facts, sudo)
    if planned is None:
        return None
    package, lines = planned
    return package, [Step("run", argv=shlex.split(line)) for line in lines]


#: Directory (inside the build's copy of the tree) holding the libcuda.so link for -lcuda.
DRIVER_LINK_DIR = ".sm120kit-link"


def driver_link_dir(state: ProvisionState, name: str) -> str:
    """Where `name`'s build finds ``libcuda.so`` (a link made after the tree is copied)."""
    return posixpath.join(state.paths.build(name), "work", DRIVER_LINK_DIR)


def driver_link(knobs: Knobs) -> tuple[str, str] | None:
    """(directory, library) when `knobs` asks for a libcuda.so link, else None."""
    library = cmake_defines.defines_from_pip_args(knobs.pip_args).get("CUDA_cuda_driver_LIBRARY")
    directory = knobs.env.get("LIBRARY_PATH", "")
    if not library or not directory.endswith("/" + DRIVER_LINK_DIR):
        return None
    return directory, library


def cccl_cxx_flags(cuda_home: str) -> str:
    """``-isystem`` for the toolkit's CCCL headers, for plain C++ units (both layouts: a runfile
    toolkit keeps headers under targets/<arch>/include, the PyPI one under include/; a
    directory that does not exist costs nothing)."""
    return " ".join(
        f"-isystem {inc}/cccl"
        for inc in (f"{cuda_home}/targets/x86_64-linux/include", f"{cuda_home}/include")
    )


def wanted_codes(arch_list: list[str]) -> list[list[str]]:
    """Per arch, the SASS names that run on it (``sm_120``, ``sm_120a``, ``sm_120f``)."""
    out = []
    for arch in parse_arch_list(arch_list):
        base = f"sm_{arch.sm}"
        out.append([base + s for s in ("", "a", "f")] if not arch.suffix else [base + arch.suffix])
    return out


def configure_defines(
    state: ProvisionState,
    knobs: Knobs,
    torch_dir: str | None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The defines of a configure equal to the wheel build's (`torch_dir` None: no
    ``Torch_DIR``, which remote/cmake_probe.py then asks the env's torch for)."""
    assert state.toolkit is not None and state.env is not None
    defines = cmake_defines.defines_from_pip_args(knobs.pip_args)
    defines.update(
        cmake_defines.skbuild_defines(state.env.python, torch_dir or "", state.toolkit.cuda_home)
    )
    if torch_dir is None:
        del defines["Torch_DIR"]
    if not state.env.torch_cuda:
        cuda = CudaVersion.parse(state.toolkit.version).xy
        defines.update(cmake_defines.cpu_torch_defines(cuda, state.toolkit.cuda_home))
    defines.update(extra or {})
    return defines


def configure_steps(state: ProvisionState, knobs: Knobs, tree: str) -> list[Step]:
    """The configure probe as Steps (a pure planner: the host's toolkit, env and the build's
    knobs in): one run of remote/cmake_probe.py's ``configure`` of `tree`, with the wheel
    build's defines, in a scratch directory the script makes and removes (outside work_root:
    plan leaves nothing behind), ``Torch_DIR`` from the env's torch. [] before the toolkit
    and the env exist (a plan on a new host)."""
    if state.toolkit is None or state.env is None:
        return []
    env_bin = posixpath.dirname(state.env.python)
    args = {
        "op": "configure",
        "src": tree,
        "torch_of": state.env.python,
        "cmake": posixpath.join(env_bin, "cmake"),
        "defines": configure_defines(state, knobs, None),
        "env": dict(knobs.env),
        "timeout": 900,
    }
    path = [posixpath.join(state.toolkit.cuda_home, "bin"), env_bin]
    return [Step("script", name="cmake_probe", python=state.host.python, args=args, path=path)]


def require_arch(pkg: PackageValues, targets: dict[str, Any], arch_list: list[str]) -> None:
    """Refuse a build of `pkg` whose main targets (its descriptor's `arch_targets`) carry no
    code for an arch in their compile commands."""
    name = pkg.name
    sass = {t: list((info or {}).get("sass") or []) for t, info in targets.items()}
    main = pkg.descriptor.arch_targets
    have = {code for target in main for code in sass.get(target, [])}
    for arch, options in zip(arch_list, wanted_codes(arch_list), strict=True):
        if not have & set(options):
            raise HostFailed(
                f"{name}: the configured build carries no code for arch {arch} "
                f"({' and '.join(main) or 'its targets'} compile "
                f"{', '.join(sorted(have)) or 'nothing'}): refusing to start a build "
                "whose wheel cannot run there"
            )


def target_rows(name: str, targets: dict[str, Any], how: str) -> list[dict[str, str]]:
    """--explain rows: each target that compiles device code, with its SASS/PTX."""
    rows = []
    for target in sorted(targets):
        info = targets[target] or {}
        codes = list(info.get("sass") or []) + list(info.get("ptx") or [])
        if not codes and "units" in info:
            continue
        units = f"{info['units']} units; " if "units" in info else ""
        rows.append(
            {
                "package": name,
                "name": f"target {target}",
                "value": ", ".join(codes) or "(no device code)",
                "reason": f"{units}{how}",
            }
        )
    return rows

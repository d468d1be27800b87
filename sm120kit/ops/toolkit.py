"""The CUDA toolkit: use a matching one already on the host, or install the recipe's side by side.

Matching rule (`toolkit_mismatch`): a toolkit from the host's facts (system ``/usr/local/cuda-X.Y``,
``CUDA_HOME``, ``PATH`` or work_root) serves the recipe when it has an ``nvcc``, its release
(``nvcc --version``'s ``release X.Y``) equals the recipe's ``cuda.version`` major.minor, and the
target driver (when known) can run its exact version by NVIDIA's table. The exact version comes
from its ``version.json``; without one it is the oldest release shipping that nvcc
(`NVCC_VERSIONS`: 13.0.1 and 13.0.2 both ship V13.0.88, and identical compilers build identical
code), and without that the release's GA (X.Y.0). So the system 13.0 toolkit (nvcc V13.0.88) on
a 580.95.05 host serves r580's 13.0.2, like torch tolerating a different minor-update nvcc. Among
several matches the recipe's exact version wins, then the expected nvcc, then work_root over
system over CUDA_HOME over PATH.

Otherwise the recipe's ``cuda.method`` installs it:

- ``pip`` (CUDA >= 13): PyPI's nvidia-cuda-nvcc/-runtime/-cccl into ``<prefix>/site-packages``
  (``pip install --target``, pip's cache reused), with ``bin``/``include``/``lib``/``nvvm`` links
  to ``site-packages/nvidia/cuXY``, ``lib64 -> lib`` and ``libcudart.so`` (torch's cpp_extension
  wants both), plus a ``version.json`` naming the release. A constraints file pins nvcc's
  companions (nvidia-nvvm, nvidia-cuda-crt) to the same nvcc version: unpinned, pip takes the
  newest (13.5 for a 13.1 nvcc) and ptxas then rejects the newer PTX.
- ``runfile``: download ``cuda.url`` (NVIDIA's URL under ``cuda.mirror``) with its sha256 checked,
  then ``sh <runfile> --silent --toolkit --toolkitpath=<tmp>``.
- ``apt``: NVIDIA's network repo for the distro (cuda-keyring for ubuntu2204, ubuntu2404,
  debian12), then ``cuda.apt_packages`` (nvcc, cudart-dev, cccl) with sudo; it lands in
  ``/usr/local/cuda-X.Y``.

pip and runfile install into ``<work_root>/toolkits/.cuda-<version>.tmp-<random>`` (same
filesystem, and a dot name the facts probe skips), verify there (``nvcc --version`` says the
release and, when `NVCC_VERSIONS` knows it, the exact nvcc; nvcc compiles a trivial kernel for
every target arch), and only then rename to ``<work_root>/toolkits/cuda-<version>``. A killed
run leaves at most a dot-named temp dir or ``downloads/.<runfile>.part-*``, which the next
install removes first. Before any of that, the ``host-compiler`` step refuses a GCC above the
recipe's ``cuda.gcc_max`` and CUDA 12.8/12.9 on glibc >= 2.41, naming the fix.

Host vars: ``nvcc_ccbin`` (the host compiler nvcc should use, e.g. ``/usr/bin/gcc-14``),
``pip_cache_dir`` (pip's cache on the host; default pip's own), ``pip_args`` (extra arguments
for every pip install, e.g. ``["--find-links", "/opt/wheels"]``).
"""

from __future__ import annotations

import posixpath
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import drivers as drv
from ..errors import HostFailed
from ..host_facts import Compiler, FoundToolkit
from ..state import ProvisionState, Toolkit
from ..toolchain.toolkit_install import (
    InstallPlan,
    apt_distro,
    install_plan,
    pip_constraints,
    sudo_prefix,
    sudo_stdin,
)
from ..toolchain.toolkit_spec import (
    NVCC_VERSIONS,
    ToolkitSpec,
    choose_compiler,
    expected_nvcc,
    find_toolkit,
    host_compiler_problem,
    missing_components,
    pip_args,
    releases_for_nvcc,
    sm_code,
    toolkit_mismatch,
)
from ..validate import check_ccbin, check_space, parse_gcc_version

if TYPE_CHECKING:
    from ..runner.pool import HostContext


INSTALL_TIMEOUT = 4 * 3600.0


@dataclass(frozen=True)
class ToolkitPlan:
    """The toolkit operation's decision: a toolkit found on the host, or an install."""

    found: Toolkit | None
    rejected: list[str]
    install: InstallPlan | None
    sudo: str = ""


def plan_toolkit(
    spec: ToolkitSpec,
    facts: Mapping[str, Any],
    *,
    driver: str | None,
    python: str,
    host_vars: Mapping[str, Any],
    token: str,
    has_password: bool = False,
) -> ToolkitPlan:
    """The toolkit operation as a pure function: facts in, a found toolkit or the install's steps
    out (`token` names the install's temp paths)."""
    found, rejected = find_toolkit(facts, spec, driver)
    if found is not None:
        return ToolkitPlan(found, rejected, None)
    distro, arch_dir, sudo = None, "x86_64", ""
    if spec.method == "apt":
        distro, arch_dir = apt_distro(facts)
        sudo = sudo_prefix(facts, has_password)
    plan = install_plan(
        spec,
        python=python,
        token=token,
        host_vars=host_vars,
        distro=distro,
        arch_dir=arch_dir,
        sudo=sudo,
    )
    return ToolkitPlan(None, rejected, plan, sudo)


def planned_toolkit(spec: ToolkitSpec) -> Toolkit:
    """What `ensure_toolkit` would install (check mode), for the steps after it."""
    return Toolkit(
        version=spec.version,
        release=spec.release,
        nvcc_version=spec.nvcc_version,
        cuda_home=spec.prefix,
        nvcc=posixpath.join(spec.prefix, "bin", "nvcc"),
        source="planned",
        method=spec.method,
    )


def _ccbin(state: ProvisionState) -> str | None:
    value = state.host.vars.get("nvcc_ccbin")
    return str(value) if value else None


def probe_ccbin(ctx: HostContext, state: ProvisionState) -> None:
    """Run host var nvcc_ccbin on the host for its real version, recorded in facts["gcc"].

    Its name says nothing (a GCC 16 may be called gcc): only running it tells the version.
    """

    ccbin = _ccbin(state)
    if not ccbin:
        return
    source = state.host.var_sources.get("nvcc_ccbin", "inventory")
    check_ccbin(ccbin, f"host {state.host.name} ({source}): nvcc_ccbin")
    res = ctx.run(f"{shlex.quote(ccbin)} -dumpfullversion -dumpversion", check=False, timeout=60)
    version = parse_gcc_version(res.stdout) if res.ok else None
    if version is None:
        tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [""]
        raise HostFailed(
            f"{state.host.name}: host var nvcc_ccbin {ccbin} ({source}) is not a working GCC "
            f"on the host (exit {res.exit_code}: {tail[0]})"
        )
    state.facts.use_compiler(Compiler(ccbin, version, "nvcc_ccbin"))


def check_host_compiler(ctx: HostContext, state: ProvisionState, spec: ToolkitSpec) -> None:
    """Step ``host-compiler``: refuse a GCC above the ceiling (or a glibc clash) before any build."""
    with ctx.step("host-compiler") as step:
        probe_ccbin(ctx, state)
        what, problem = host_compiler_problem(state.facts.json, spec, _ccbin(state))
        if problem:
            raise HostFailed(f"{state.host.name}: {problem}")
        step.message = f"{what} <= GCC {spec.gcc_max} for CUDA {spec.version}"


def ensure_toolkit(ctx: HostContext, state: ProvisionState) -> Toolkit:
    """Find the recipe's toolkit on the host or install it; sets and returns ``state.toolkit``.

    In check mode nothing runs on the host: the step says what would be installed, with the
    exact commands, and ``state.toolkit`` is the planned toolkit (source ``planned``). A toolkit
    already in ``state`` (ensured earlier in the run) is returned as is.
    """
    if state.toolkit is not None:
        return state.toolkit  # ensured earlier in this run
    spec = ToolkitSpec.from_state(state)
    check_host_compiler(ctx, state, spec)
    driver = state.resolved.target.driver
    with ctx.step("toolkit") as step:
        op = plan_toolkit(
            spec,
            state.facts.json,
            driver=driver,
            python=ctx.host.python,
            host_vars=state.host.vars,
            token=secrets.token_hex(4),
            has_password=bool(ctx.runner.options.connect.sudo_password),
        )
        found, plan, sudo = op.found, op.install, op.sudo
        for line in op.rejected:
            ctx.log.info("toolkit passed over: %s", line)
        if found is not None:
            exact = found.version in drv.TOOLKIT_MIN_DRIVER  # else version.json was missing
            how = "" if found.version == spec.version else f" serves CUDA {spec.version}"
            step.message = (
                f"CUDA {found.version if exact else found.release} at {found.cuda_home} "
                f"({found.source}, nvcc V{found.nvcc_version}){how}; {spec.needs}"
            )
            state.toolkit = found
            return found
        assert plan is not None  # plan_toolkit plans an install when nothing was found
        what = f"install CUDA {spec.version} ({spec.method}) into {spec.prefix}"
        # A toolkit of the right release that only lacks libraries: say why it is not used.
        bare = replace(spec, components=())
        for entry in state.facts.toolkit_docs():
            lacks = missing_components(entry, spec)
            if lacks and toolkit_mismatch(entry, bare, driver) is None:
                what += f"; {entry.get('path')} {lacks}"
        what += f"; {spec.needs}"
        if not ctx.may_act(step, what, plan.commands):
            state.toolkit = planned_toolkit(spec)
            return state.toolkit
        step.commands = list(plan.commands)
        if spec.method in INSTALL_SPACE:
            check_space(
                state.facts.json,
                INSTALL_SPACE[spec.method] + (COMPONENT_SPACE if spec.components else 0),
                what.replace("install ", "", 1),
                state.host.name,
            )
        doc = _install(ctx, spec, plan, sudo)
        nvcc = doc.get("nvcc") or {}
        size = doc.get("size_bytes")
        step.message = (
            f"installed CUDA {spec.version} ({spec.method}) at {spec.prefix}: nvcc "
            f"V{nvcc.get('version')} compiled {', '.join(sm_code(a) for a in spec.arch)}"
            + (f", {size / 2**20:.0f} MiB" if isinstance(size, (int, float)) else "")
            + f" in {doc.get('seconds', 0):.1f}s"
        )
    toolkit = Toolkit(
        version=spec.version,
        release=spec.release,
        nvcc_version=nvcc.get("version"),
        cuda_home=spec.prefix,
        nvcc=posixpath.join(spec.prefix, "bin", "nvcc"),
        source="system" if spec.method == "apt" else "work_root",
    )
    # Later steps of this run read the facts: let them see the new toolkit.
    state.facts.add_toolkit(
        FoundToolkit(
            path=toolkit.cuda_home,
            source=toolkit.source,
            version=toolkit.version,
            nvcc=toolkit.nvcc,
            nvcc_release=toolkit.release,
            nvcc_version=toolkit.nvcc_version,
            aliases=(toolkit.cuda_home,),
        )
    )
    state.toolkit = toolkit
    return toolkit


#: Free bytes a toolkit install needs under work_root (our estimates, with margin): the pip
#: wheels unpack to a few hundred MB; a runfile (about 4 GB) is downloaded, then extracted.
#: apt installs outside work_root and is not checked.
INSTALL_SPACE = {"pip": 1 << 30, "runfile": 10 << 30}


#: What the pip route's library wheels add (cuBLAS/cuBLASLt alone unpack to about 600 MB).
COMPONENT_SPACE = 2 << 30


def _install(ctx: HostContext, spec: ToolkitSpec, plan: InstallPlan, sudo: str) -> dict[str, Any]:
    password = ctx.runner.options.connect.sudo_password
    stdin = sudo_stdin(sudo, password)
    for command in plan.apt_commands:
        ctx.run(command, stdin=stdin, timeout=INSTALL_TIMEOUT)
    measure = None if spec.method == "apt" else spec.prefix
    doc = ctx.script(
        "install_cuda",
        {"steps": plan.steps, "cleanup": plan.cleanup, "measure": measure},
        timeout=INSTALL_TIMEOUT,
    )
    if not doc.get("ok"):
        error = str(doc.get("error") or "install failed")
        if "No module named pip" in error:
            error += f" (install pip for {ctx.host.python}, or point ansible_python_interpreter at a Python with pip)"
        if "sha256 mismatch" in error:
            error += f" (cuda.sha256 from {spec.sha256_source})"
        raise HostFailed(f"CUDA {spec.version} ({spec.method}): {error}")
    return doc


#: The operation, and the pure parts it is made of (their own modules) under their old names.
__all__ = [
    "NVCC_VERSIONS",
    "InstallPlan",
    "ToolkitPlan",
    "ToolkitSpec",
    "apt_distro",
    "check_host_compiler",
    "choose_compiler",
    "ensure_toolkit",
    "expected_nvcc",
    "find_toolkit",
    "host_compiler_problem",
    "install_plan",
    "pip_args",
    "pip_constraints",
    "plan_toolkit",
    "planned_toolkit",
    "releases_for_nvcc",
    "sm_code",
    "sudo_prefix",
    "sudo_stdin",
    "toolkit_mismatch",
]

"""Step ``prereqs:<pkg>``: what a package's CMake configure needs on the host, installed where
the host allows it (libnuma's headers for mscclpp); the configure rules themselves are
`sm120kit/builds/cmake_config.py`."""

from __future__ import annotations

import posixpath
from typing import Any

from ..builds.cmake_config import cccl_cxx_flags, driver_link_dir, numa_hint, numa_steps
from ..builds.knobs import Knobs
from ..errors import HostFailed
from ..runner.pool import HostContext
from ..state import ProvisionState
from ..steps import commands
from ..toolchain.toolkit_install import sudo_prefix, sudo_stdin


def install_numa(ctx: HostContext, state: ProvisionState, step: Any, name: str) -> bool:
    """Install libnuma's headers where the host allows it (host var install_prerequisites,
    default true; a known distro); False when it was not installed (check mode included).
    What plan shows is `numa_steps`' lines, and each is what runs."""

    password = ctx.runner.options.connect.sudo_password
    sudo = sudo_prefix(state.facts.json, bool(password))
    planned = numa_steps(state.facts.json, state.host.vars, sudo)
    if planned is None:
        return False
    package, steps = planned
    lines = commands(steps)
    if not ctx.may_act(step, f"install {package} (mscclpp needs libnuma)", lines):
        return False
    step.commands = list(lines)
    stdin = sudo_stdin(sudo, password)
    for command in lines:
        res = ctx.run(command, check=False, stdin=stdin, timeout=1800)
        if res.exit_code != 0:
            tail = (res.stderr or res.stdout or "").strip().splitlines()[-1:] or [""]
            raise HostFailed(
                f"installing {package} failed (exit {res.exit_code}: {tail[0]}); "
                + numa_hint(name)
                + " (or set host var install_prerequisites: false and install it yourself)"
            )
    return True


def ensure_prerequisites(
    ctx: HostContext, state: ProvisionState, name: str, knobs: Knobs
) -> dict[str, Any]:
    """Step ``prereqs:<pkg>``; adds ``CUDA_cuda_driver_LIBRARY`` to `knobs` when found.

    A missing libnuma is installed with the host's package manager (apt or dnf, as root or
    through sudo) unless host var ``install_prerequisites`` is false; in plan the step says
    what it would run."""
    cuda_home = state.toolkit.cuda_home if state.toolkit is not None else ""
    with ctx.step(f"prereqs:{name}") as step:
        given = str(state.host.vars.get("cuda_driver_library") or "")
        args = {"op": "prereqs", "cuda_home": cuda_home, "cuda_driver": given}
        doc = ctx.script("cmake_probe", args)
        missing = []
        numa_planned = False
        if not (doc.get("numa_header") and doc.get("numa_library")):
            if install_numa(ctx, state, step, name):
                doc = ctx.script("cmake_probe", args)
            else:
                numa_planned = step.status == "changed"  # check mode: "would install"
            if not numa_planned and not (doc.get("numa_header") and doc.get("numa_library")):
                missing.append(numa_hint(name))
        tk = state.toolkit
        if cuda_home and not doc.get("cuda_driver") and tk is not None and tk.method == "runfile":
            # Check mode, the toolkit not installed yet: NVIDIA's runfile toolkit installs the
            # stub that the real run's probe then finds (the default's second place).
            doc["cuda_driver"] = posixpath.join(cuda_home, "lib64", "stubs", "libcuda.so")
            doc["cuda_driver_planned"] = True
        if cuda_home and not doc.get("cuda_driver"):
            missing.append(
                f"a libcuda.so for CUDA::cuda_driver (none in {cuda_home}/lib64/stubs or the "
                "system library directories, host var cuda_driver_library unset): mscclpp links "
                "it; the runfile toolkit ships the stub, a GPU host's driver has libcuda.so.1"
            )
        lacks = doc.get("cuda_driver_lacks") or []
        if cuda_home and doc.get("cuda_driver") and lacks:
            missing.append(
                f"{doc['cuda_driver']} does not define the CUDA driver API (lacks "
                f"{', '.join(lacks)}): linked against it, the linker's --as-needed drops "
                "libcuda.so.1 from the modules, which then fail to load with 'undefined symbol "
                "cu...'; point host var cuda_driver_library at the toolkit's "
                "lib64/stubs/libcuda.so or the driver's libcuda.so.1"
            )
        if missing:
            raise HostFailed(f"{name}: host prerequisites missing: " + "; ".join(missing))
        if cuda_home and state.env is not None and state.env.torch_cuda:
            knobs.define(
                "CMAKE_CXX_FLAGS",
                cccl_cxx_flags(cuda_home),
                "CUDA 13 keeps CCCL (cuda/atomic, ...) under include/cccl, which nvcc adds for .cu "
                "units and CMake's FindCUDAToolkit does not give C++ units; mscclpp's fifo.cc "
                "includes <cuda/atomic>",
            )
        if doc.get("cuda_driver"):
            knobs.define(
                "CUDA_cuda_driver_LIBRARY",
                doc["cuda_driver"],
                "CUDA::cuda_driver for mscclpp (only link steps read it)",
            )
            knobs.set_env(
                "LIBRARY_PATH",
                driver_link_dir(state, name),
                "common_ops, spatial_ops and deep_gemm_cpp link `cuda` by name (-lcuda; "
                f"{name}'s CMakeLists.txt lines 421-422, 539, 555), which needs a file named "
                f"libcuda.so on the linker's path: the build links one there to {doc['cuda_driver']} "
                "(a driver-only host has libcuda.so.1 alone); the host's LIBRARY_PATH follows",
            )
        if numa_planned:
            return doc  # keeps the step's "would install ..." message
        driver = str(doc.get("cuda_driver") or "toolkit not yet")
        if doc.get("cuda_driver_planned"):
            driver += " (installed with the planned runfile toolkit)"
        found = [str(doc.get("numa_header")), driver]
        message = "libnuma: {}; libcuda: {}".format(*found)
        step.message = ("installed libnuma; " + message) if step.status == "changed" else message
        return doc

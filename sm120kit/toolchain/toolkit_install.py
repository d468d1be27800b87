"""How the recipe's CUDA toolkit is installed, as Steps (`sm120kit.steps`): pip or runfile into
a dot-named temp dir under ``<work_root>/toolkits`` that is verified and then renamed, or
NVIDIA's apt repo with sudo. Pure functions; `sm120kit.ops.toolkit` runs what they return.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..builds import cuda_libraries as cudalibs
from ..errors import HostFailed
from ..remote.lib.names import CUDA_VERSION_JSON
from ..steps import Step
from ..steps import commands as render_commands
from .toolkit_spec import ToolkitSpec, pip_args, sm_code

#: (os id, version id) -> NVIDIA's repo name for the apt route.
APT_DISTROS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        ("ubuntu", "22.04"): "ubuntu2204",
        ("ubuntu", "24.04"): "ubuntu2404",
        ("debian", "12"): "debian12",
    }
)


#: Machine -> NVIDIA's repo architecture directory.
APT_ARCHES: Mapping[str, str] = MappingProxyType({"x86_64": "x86_64", "aarch64": "sbsa"})


KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"


CHECK_KERNEL = "__global__ void sm120kit_check(int *p) { p[threadIdx.x] = 1; }\n"


@dataclass
class InstallPlan:
    """Steps for remote/install_cuda.py (or apt commands), and the same as shell lines."""

    steps: list[Step]
    cleanup: list[str]
    apt_commands: list[str]
    commands: list[str]


def _q(path: str) -> str:
    return shlex.quote(path)


def version_json(spec: ToolkitSpec, **extra: Any) -> str:
    """The version.json written into a pip (or version.json-less runfile) toolkit."""
    doc: dict[str, Any] = {"cuda": {"name": "CUDA SDK", "version": spec.version}}
    if spec.nvcc_version:
        doc["cuda_nvcc"] = {"name": "CUDA NVCC", "version": spec.nvcc_version}
    doc["sm120kit"] = {"method": spec.method, **extra}
    return json.dumps(doc, sort_keys=True) + "\n"


def verify_steps(spec: ToolkitSpec, cuda_home: str, scratch: str, ccbin: str | None) -> list[Step]:
    """nvcc --version must match; then nvcc compiles a trivial kernel for every target arch."""
    nvcc = posixpath.join(cuda_home, "bin", "nvcc")
    src, obj = posixpath.join(scratch, "check.cu"), posixpath.join(scratch, "check.o")
    compile_argv = [nvcc, *(["-ccbin", ccbin] if ccbin else []), "-c", src, "-o", obj]
    for arch in spec.arch:
        code = sm_code(arch)
        compile_argv.append(f"--generate-code=arch={code.replace('sm_', 'compute_')},code={code}")
    return [
        Step("mkdir", path=scratch),
        Step("write", path=src, text=CHECK_KERNEL),
        Step(
            "verify",
            nvcc=nvcc,
            release=spec.release,
            nvcc_version=spec.nvcc_version,
            toolkit=spec.version,
            compile=compile_argv,
            output=obj,
        ),
        Step("remove", path=scratch),
    ]


def pip_constraints(spec: ToolkitSpec) -> list[str]:
    """Pins for nvcc's companion wheels, which nvidia-cuda-nvcc requires unpinned."""
    pin = f"=={spec.nvcc_version}" if spec.nvcc_version else f"=={spec.release}.*"
    names = ["nvidia-nvvm", "nvidia-cuda-crt"]
    if spec.nvcc_version:
        names.insert(0, "nvidia-cuda-nvcc")
    return [f"{name}{pin}" for name in names]


def _toolkits_dir(spec: ToolkitSpec) -> str:
    return posixpath.join(spec.work_root, "toolkits")


def stale_globs(work_root: str) -> list[str]:
    """Leftovers of interrupted installs: temp toolkits and partial downloads."""
    return [
        posixpath.join(work_root, "toolkits", ".cuda-*.tmp-*"),
        posixpath.join(work_root, "downloads", ".*.part-*"),
    ]


def install_plan(
    spec: ToolkitSpec,
    *,
    python: str,
    token: str,
    host_vars: Mapping[str, Any],
    distro: str | None = None,
    arch_dir: str = "x86_64",
    sudo: str = "",
) -> InstallPlan:
    """Everything an install of `spec` runs, in order, with `token` naming its temp paths."""
    ccbin = host_vars.get("nvcc_ccbin")
    ccbin = str(ccbin) if ccbin else None
    scratch = posixpath.join(spec.work_root, "tmp", f"nvcc-check-{token}")
    if spec.method == "apt":
        return _apt_plan(spec, python, scratch, ccbin, distro, arch_dir, sudo)
    tmp = posixpath.join(_toolkits_dir(spec), f".cuda-{spec.version}.tmp-{token}")
    steps: list[Step] = [
        Step("clean", globs=stale_globs(spec.work_root)),
        Step("mkdir", path=tmp),
    ]
    cleanup = [tmp, scratch]
    if spec.method == "pip":
        steps += _pip_steps(spec, tmp, python, host_vars)
    elif spec.method == "runfile":
        if not spec.url:
            raise HostFailed(
                f"no download URL for CUDA {spec.version}: set recipe.cuda.runfile or recipe.cuda.url"
            )
        dest = posixpath.join(
            spec.work_root, "downloads", f".{posixpath.basename(spec.url)}.part-{token}"
        )
        cleanup.append(dest)
        steps += [
            Step("download", url=spec.url, dest=dest, sha256=spec.sha256),
            Step("run", argv=["sh", dest, "--silent", "--toolkit", f"--toolkitpath={tmp}"]),
            Step("remove", path=dest),
            Step(
                "write",
                path=posixpath.join(tmp, CUDA_VERSION_JSON),
                text=version_json(spec, url=spec.url),
                if_missing=True,
            ),
        ]
    else:
        raise HostFailed(f"unknown cuda.method {spec.method!r} (runfile, pip or apt)")
    steps += verify_steps(spec, tmp, scratch, ccbin)
    steps.append(Step("rename", src=tmp, dest=spec.prefix))
    commands = render_commands(steps)
    return InstallPlan(steps, cleanup, [], commands)


def _pip_steps(
    spec: ToolkitSpec, tmp: str, python: str, host_vars: Mapping[str, Any]
) -> list[Step]:
    if not spec.pip_packages:
        raise HostFailed(
            f"CUDA {spec.version} has no pip packages (recipe.cuda.pip_packages); the pip route "
            "needs CUDA >= 13"
        )
    site = posixpath.join(tmp, "site-packages")
    tree = f"site-packages/nvidia/cu{spec.major}"
    constraints = posixpath.join(tmp, "pip-constraints.txt")
    packages = list(spec.pip_packages)
    if spec.components:
        packages.append(cudalibs.meta_requirement(spec.components, spec.version))
    argv = [
        python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
        "--no-warn-script-location", "--target", site, "-c", constraints,
        *pip_args(host_vars), *packages,
    ]  # fmt: skip
    steps: list[Step] = [
        Step("write", path=constraints, text="\n".join(pip_constraints(spec)) + "\n"),
        Step("run", argv=argv),
    ]
    for name in ("bin", "include", "lib", "nvvm"):
        steps.append(Step("link", target=f"{tree}/{name}", path=posixpath.join(tmp, name)))
    # lib64 in the wheel tree too: nvcc finds its libraries at `<realpath of bin>/../lib64`,
    # which is inside the tree (CMake's CUDA compiler check links with -L that directory).
    steps += [
        Step("link", target="lib", path=posixpath.join(tmp, "lib64")),
        Step("link", target="lib", path=posixpath.join(tmp, tree, "lib64")),
    ]
    # The wheels ship only versioned sonames; `-lcudart`, `-lcublas` and FindCUDAToolkit want
    # the plain name. The sonames follow the CUDA major (libcublas.so.13 in CUDA 13).
    sonames = ["libcudart.so"] + [
        lib for name in spec.components for lib in cudalibs.COMPONENTS[name].libs
    ]
    for lib in sonames:
        steps.append(
            Step("link", target=f"{lib}.{spec.major}", path=posixpath.join(tmp, tree, "lib", lib))
        )
    steps.append(
        Step(
            "write",
            path=posixpath.join(tmp, CUDA_VERSION_JSON),
            text=version_json(spec, pip_packages=packages),
        )
    )
    return steps


def apt_distro(facts: Mapping[str, Any]) -> tuple[str, str]:
    """NVIDIA's repo (distro, arch dir) for the host, e.g. (``debian12``, ``x86_64``)."""
    os_ = facts.get("os") or {}
    key = (str(os_.get("id") or ""), str(os_.get("version_id") or ""))
    distro = APT_DISTROS.get(key)
    if distro is None:
        known = ", ".join(f"{i} {v}" for i, v in APT_DISTROS)
        raise HostFailed(
            f"cuda.method apt: no NVIDIA repo for {os_.get('pretty') or key} (supported: {known}); "
            "use recipe.cuda.method runfile or pip"
        )
    arch = APT_ARCHES.get(str(facts.get("arch") or ""))
    if arch is None:
        raise HostFailed(f"cuda.method apt: no NVIDIA repo for machine {facts.get('arch')}")
    return distro, arch


def sudo_prefix(facts: Mapping[str, Any], has_password: bool) -> str:
    """How root commands run: as root directly, ``sudo -S`` fed the password on stdin, or ``sudo -n``."""
    if facts.get("user") == "root":
        return ""
    return "sudo -S -p '' " if has_password else "sudo -n "


def sudo_stdin(sudo: str, password: str | None) -> str | None:
    """What a command run with `sudo` (from `sudo_prefix`) gets on stdin: the password for
    ``sudo -S``, never on a command line or into the log."""
    return password + "\n" if password and sudo.startswith("sudo -S") else None


def _apt_plan(
    spec: ToolkitSpec,
    python: str,
    scratch: str,
    ccbin: str | None,
    distro: str | None,
    arch_dir: str,
    sudo: str,
) -> InstallPlan:
    if distro is None:
        raise HostFailed("cuda.method apt needs the host's distro")
    downloads = posixpath.join(spec.work_root, "downloads")
    deb = posixpath.join(downloads, KEYRING_DEB)
    url = f"{spec.mirror.rstrip('/')}/repos/{distro}/{arch_dir}/{KEYRING_DEB}"
    fetch = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])"
    apt = [
        f"mkdir -p {_q(downloads)}",
        # One writer per file: the shell's pid names the temporary (a second run never writes
        # into a first one's), and the sweep of `downloads/.*.part-*` takes a dead run's.
        f"part={_q(posixpath.join(downloads, '.' + KEYRING_DEB + '.part-'))}$$"
        f' && {shlex.join([python, "-c", fetch, url])} "$part" && mv "$part" {_q(deb)}',
        f"{sudo}dpkg -i {_q(deb)}",
        f"{sudo}apt-get update",
        f"{sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        + " ".join(_q(p) for p in spec.apt_packages),
    ]
    steps = verify_steps(spec, spec.prefix, scratch, ccbin)
    commands = apt + render_commands(steps)
    return InstallPlan(steps, [scratch], apt, commands)

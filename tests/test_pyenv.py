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

from sm120kit.connection import ConnectOptions
from sm120kit.errors import HostFailed
from sm120kit.host import Host
from sm120kit.ops import pyenv
from sm120kit.plan import PlanOptions
from sm120kit.results import RunResult
from sm120kit.runner import Runner, RunOptions
from tests.support.fleet import Fleet
from tests.support.sample_wheel import cache_root
from tests.test_toolkit import cli, step_of, tree_hash, write_inventory

ENV_VARS: dict[str, Any] = {
    "recipe.torch.index": "pypi",
    "recipe.torch.version": "2.13.0",
    "recipe.torch.cuda": "cpu",
    "provision_packages": ["minikernel"],
    # The fleet hosts have their own HOME, so the machine's user pip.conf (find-links
    # /opt/wheels) is not theirs: pass the wheelhouse like an offline site would.
    "pip_args": ["--find-links", "/opt/wheels"],
    "pip_cache_dir": str(cache_root() / "pip"),
}
TARGET = ["--driver", "580.95.05", "--arch", "12.0"]  # gpu3 has no GPU: r580, CUDA 13.0.2


# --------------------------------------------------------------------------- pure rules


def test_flavour_and_tools() -> None:
    assert pyenv.flavour("13.0") == "cu130" and pyenv.flavour("cpu") == "cpu"
    assert pyenv.build_tools(["minikernel"]) == ["ninja", "setuptools", "wheel", "packaging"]
    assert pyenv.build_tools(["minikernel", "sgl-kernel"])[-2:] == [
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
    # FACTS.md 3: the cu126 2.7.0 wheel lacks sm_120.
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


def test_env_steps_use_the_torch_index() -> None:
    steps = pyenv.env_steps(
        _spec(), "/usr/bin/python3.11", {}, rebuild=True, exists=False, tools=["ninja"]
    )
    lines = [pyenv.render_step(s) for s in steps]
    assert lines[0] == "/usr/bin/python3.11 -m venv /w/envs/x"
    assert lines[2].endswith("--index-url https://download.pytorch.org/whl/cu130 torch==2.9.1")
    pypi = pyenv.env_steps(
        _spec("cpu", "pypi"), "python3", {}, rebuild=True, exists=True, tools=["ninja"]
    )
    assert pyenv.render_step(pypi[0]) == "rm -rf /w/envs/x"
    assert "--index-url" not in pyenv.render_step(pypi[3])
    # Only tools missing from a complete env: no venv, no torch.
    add = pyenv.env_steps(_spec(), "python3", {}, rebuild=False, exists=True, tools=["cmake"])
    assert [s["op"] for s in add] == ["run", "inspect", "marker"]


# --------------------------------------------------------------------------- over SSH


def _run(fleet: Fleet, tmp: Path, name: str, work: Path, packages: list[str] | None) -> RunResult:
    host = Host(
        name, vars={**fleet.all_vars(fleet.by_name(name)), **ENV_VARS, "work_root": str(work)}
    )
    runner = Runner(
        RunOptions(
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts), connect_retries=1),
            run_root=str(tmp / "runs"),
        )
    )
    opts = PlanOptions(driver="580.95.05", arch="12.0", packages=packages)
    return runner.run("env", [host], pyenv.env_task(opts), lock=True)


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
    assert any("--find-links /opt/wheels torch==2.13.0" in c for c in step["commands"])
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
    assert env["cxx11_abi"] is True  # FACTS.md 3: torch 2.7+ uses the C++11 ABI
    assert env["python_abi"] == "cp311" and env["platform"] == "linux_x86_64"
    assert (built["env_path"] / pyenv.MARKER).is_file()
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
    assert code == 2 and step_of(entry, "env")["status"] == "failed"
    assert "wants Python 3.9 but the host has" in entry["error"] and "3.11" in entry["error"]

"""`invoke recipes`, `invoke plan` and `invoke provision` end to end, over SSH and locally.

Real parts: real sshd (gpu3 of the fleet, a host without a GPU) and the local connection, real
nvcc compiling the sample kernel for sm_120, real pip building the managed env with torch
2.13.0+cpu, the real wheel cache and smoke probe. Simulated: the GPUs of the fleet hosts
(nvidia-smi stubs), so the build hosts cross-build for an R580 SM120 host through
`target_driver`/`target_arch`, as inventory/hosts.yaml's `local` host does.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

CROSS = {
    "target_driver": "580.95.05",
    "target_arch": "12.0",
    "recipe.torch.index": "pypi",
    "recipe.torch.version": "2.13.0",
    "recipe.torch.cuda": "cpu",
    "provision_packages": ["minikernel"],
    # sshd sessions do not inherit this machine's pip settings; torch 2.13.0+cpu is here.
    "pip_args": ["--find-links", "/opt/wheels"],
}


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and link under root with a hash of its content: proof that nothing changed."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def _inventory(fleet: Fleet, tmp: Path) -> Path:
    doc = yaml.safe_load(fleet.inventory.read_text())
    work = tmp / "work"
    work.mkdir()
    doc["all"]["hosts"]["gpu3"].update({**CROSS, "work_root": str(work / "gpu3")})
    doc["all"]["hosts"]["local"] = {
        "ansible_connection": "local",
        **CROSS,
        "work_root": str(work / "local"),
    }
    inv = tmp / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    return inv


@pytest.fixture(scope="module")
def provisioned(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """plan, provision, provision again, plan again on gpu3 (SSH) and local, in one place."""
    tmp = tmp_path_factory.mktemp("provision")
    inv = _inventory(fleet, tmp)
    env = invoke_env(fleet, tmp, XDG_CACHE_HOME=str(tmp / "xdg"))
    hosts = ["-H", "gpu3,local", "-i", str(inv), "--json"]
    out: dict[str, Any] = {"work": tmp / "work"}
    (tmp / "work" / "gpu3").mkdir()
    (tmp / "work" / "local").mkdir()
    before = tree_digest(tmp / "work")
    out["plan1"] = run_invoke(["plan", *hosts], env)
    out["plan1_unchanged"] = tree_digest(tmp / "work") == before
    out["run1"] = run_invoke(["provision", *hosts], env)
    out["run2"] = run_invoke(["provision", *hosts], env)
    before = tree_digest(tmp / "work")
    out["plan2"] = run_invoke(["plan", *hosts], env)
    out["plan2_unchanged"] = tree_digest(tmp / "work") == before
    return out


def test_plan_changes_nothing_and_says_what_would_run(provisioned: dict[str, Any]) -> None:
    proc = provisioned["plan1"]
    assert proc.returncode == 0, proc.stderr
    assert provisioned["plan1_unchanged"]
    doc = json_of(proc)
    assert doc["check_mode"] is True
    for name in ("gpu3", "local"):
        host = doc["hosts"][name]
        assert host["recipe"] == "r580"
        steps = {s["name"]: s for s in host["steps"]}
        assert steps["toolkit"]["status"] == "ok"  # the system CUDA 13.0 serves r580
        assert steps["env"]["status"] == "changed"
        assert any("pip install" in c and "torch==2.13.0" in c for c in steps["env"]["commands"])
        assert steps["wheel:minikernel"]["status"] == "changed"
        assert any("pip wheel" in c for c in steps["wheel:minikernel"]["commands"])
        # plan says where each value came from
        sources = {k: src for k, _v, src in host["values"]}
        assert "recipe.torch.version" in sources["torch.version"]


def test_provision_builds_once_installs_everywhere_and_smokes(
    provisioned: dict[str, Any],
) -> None:
    proc = provisioned["run1"]
    assert proc.returncode == 0, proc.stderr + proc.stdout
    doc = json_of(proc)
    froms = sorted(h["packages"]["minikernel"]["wheel_from"] for h in doc["hosts"].values())
    # one exact set of inputs: one build, the other host takes the wheel from the cache
    assert froms[0] == "build" and froms[1].startswith("cache:"), froms
    for name, host in doc["hosts"].items():
        assert host["status"] == "changed", (name, host["error"])
        steps = {s["name"]: s["status"] for s in host["steps"]}
        assert steps["install:minikernel"] == "changed"
        assert steps["smoke"] == "ok"
        assert host["env"]["torch_version"].startswith("2.13.0")
    assert "RECAP" in proc.stderr


def test_second_provision_reports_zero_changed(provisioned: dict[str, Any]) -> None:
    proc = provisioned["run2"]
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    for name, host in doc["hosts"].items():
        assert host["status"] == "ok", (name, host["steps"])
        assert host["changed"] == 0
        assert all(s["status"] == "ok" for s in host["steps"])
    assert doc["summary"]["changed"] == 0


def test_plan_after_provision_is_all_ok(provisioned: dict[str, Any]) -> None:
    proc = provisioned["plan2"]
    assert proc.returncode == 0, proc.stderr
    assert provisioned["plan2_unchanged"]
    for host in json_of(proc)["hosts"].values():
        assert host["changed"] == 0


def test_recipes_per_host(fleet: Fleet, tmp_path: Path) -> None:
    env = invoke_env(fleet, tmp_path)
    proc = run_invoke(["recipes", "-H", "gpu1,gpu2,gpu3,gpu4", "--json"], env)
    assert proc.returncode == 2  # gpu3 has no GPU and no target; gpu4's driver is too old
    hosts = json_of(proc)["hosts"]
    assert (hosts["gpu1"]["recipe"], hosts["gpu1"]["cuda"]) == ("r580", "13.0.2")
    assert (hosts["gpu2"]["recipe"], hosts["gpu2"]["cuda"]) == ("r570", "12.8.1")
    assert hosts["gpu3"]["status"] == "failed"
    assert "--driver" in hosts["gpu3"]["error"] and "target_driver" in hosts["gpu3"]["error"]
    assert hosts["gpu4"]["status"] == "failed" and "570.26" in hosts["gpu4"]["error"]
    proc = run_invoke(
        ["recipes", "-H", "gpu3", "--driver", "570.86.10", "--arch", "12.0", "--json"], env
    )
    assert proc.returncode == 0, proc.stderr
    assert json_of(proc)["hosts"]["gpu3"]["cuda"] == "12.8.0"


def test_recipes_catalog(tmp_path: Path) -> None:
    env = invoke_env(None, tmp_path)
    proc = run_invoke(["recipes", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    assert {"r570", "r575", "r580", "r590", "r595"} <= set(doc["recipes"])
    proc = run_invoke(["recipes", "--driver", "575.57.08", "--json"], env)
    assert json_of(proc)["selected"]["cuda"] == "12.9.1"
    proc = run_invoke(["recipes", "--driver", "560.35.03", "--json"], env)
    assert proc.returncode == 1
    assert "570.26" in json_of(proc)["error"]
    proc = run_invoke(["recipes"], env)
    assert "r580" in proc.stdout and "13.0.2" in proc.stdout

"""`invoke recipes`, `invoke plan` and `invoke provision` end to end, over SSH and locally.

Real parts: real sshd (gpu3 of the fleet, a host without a GPU) and the local connection, real
nvcc compiling the sample kernel for sm_120, real pip building the managed env with torch
2.13.0+cpu, the real wheel cache and smoke probe. Simulated: the GPUs of the fleet hosts
(nvidia-smi stubs), so the build hosts cross-build for an R580 SM120 host through
`target_driver`/`target_arch`, as inventory/hosts.yaml's `local` host does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

#: The cold run (two envs with torch, one sm_120 build, two smokes) outlasts the suite's
#: default per-test timeout on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(3000)

CROSS = {
    "target_driver": "580.95.05",
    "target_arch": "12.0",
    "recipe.torch.index": "pypi",
    "recipe.torch.version": "2.13.0",
    "recipe.torch.cuda": "cpu",
    "provision_packages": ["minikernel"],
    "provision_stack": False,  # the Quickstart's sample build, as inventory/hosts.yaml's local
    # sshd sessions do not inherit this machine's pip settings; torch 2.13.0+cpu is here.
    "pip_args": ["--find-links", "/opt/wheels"],
}


#: A GPU-less fleet host: it cross-builds like `local`. One SSH host and the local connection
#: cover both transports; a second SSH host would prove nothing more at the cost of another env
#: with torch (the cache across many hosts is test_wheelcache's three-host build).
FLEET_HOSTS = ("gpu3",)
HOSTS = (*FLEET_HOSTS, "local")


def replace_installed_build(work: Path) -> None:
    """Install another build of the same minikernel version into local's env, behind the
    tool's back: its wheel unpacked, one file changed, repacked with a build tag."""
    env = work / "local" / "envs" / "r580-py3.11-torch2.13.0-cpu"
    wheel = Path(
        json.loads((env / ".sm120kit" / "installed" / "minikernel.json").read_text())["wheel"]
    )
    tmp = work.parent / "rebuild"
    (tmp / "dist").mkdir(parents=True)
    py = str(env / "bin" / "python")
    subprocess.run([py, "-m", "wheel", "unpack", str(wheel), "-d", str(tmp)], check=True)
    tree = next(tmp.iterdir())
    init = next(tree.rglob("minikernel/__init__.py"))
    init.write_text(init.read_text() + "\n# another build\n")
    subprocess.run(
        [py, "-m", "wheel", "pack", str(tree), "-d", str(tmp / "dist"), "--build-number", "1"],
        check=True,
    )
    new = next((tmp / "dist").glob("*.whl"))
    subprocess.run(
        [
            py,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--force-reinstall",
            "--no-index",
            str(new),
        ],
        check=True,
    )


def tree_digest(root: Path) -> dict[str, str]:
    """Every file, link and directory under root with its mode, size and modification time in
    nanoseconds: proof that nothing was written (a rewrite with the same bytes still moves the
    mtime), without hashing the gigabytes of the envs with torch."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        else:
            st = path.stat()
            out[rel] = f"{st.st_mode:o} {st.st_size} {st.st_mtime_ns}"
    return out


def _inventory(fleet: Fleet, tmp: Path) -> Path:
    doc = yaml.safe_load(fleet.inventory.read_text())
    work = tmp / "work"
    work.mkdir()
    for name in FLEET_HOSTS:
        doc["all"]["hosts"][name].update({**CROSS, "work_root": str(work / name)})
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
    """plan, provision, provision again, plan again on gpu3 (SSH) and local, then
    provision after another build replaced local's minikernel, and provision --recheck."""
    tmp = tmp_path_factory.mktemp("provision")
    inv = _inventory(fleet, tmp)
    env = invoke_env(fleet, tmp, XDG_CACHE_HOME=str(tmp / "xdg"))
    hosts = ["-H", ",".join(HOSTS), "-i", str(inv), "--json"]
    out: dict[str, Any] = {"work": tmp / "work"}
    for name in HOSTS:
        (tmp / "work" / name).mkdir()
    before = tree_digest(tmp / "work")
    out["plan1"] = run_invoke(["plan", *hosts], env)
    out["plan1_unchanged"] = tree_digest(tmp / "work") == before
    # Cold: two envs with torch and one sm_120 build; slow on a shared 2-core machine.
    out["run1"] = run_invoke(["provision", *hosts], env, timeout=2400)
    out["run2"] = run_invoke(["provision", *hosts], env)
    before = tree_digest(tmp / "work")
    out["plan2"] = run_invoke(["plan", *hosts], env)
    out["plan2_unchanged"] = tree_digest(tmp / "work") == before
    replace_installed_build(tmp / "work")
    out["run3"] = run_invoke(["provision", *hosts], env)
    out["recheck"] = run_invoke(["provision", "--recheck", "-H", "gpu3", *hosts[2:]], env)
    return out


def test_plan_changes_nothing_and_says_what_would_run(provisioned: dict[str, Any]) -> None:
    proc = provisioned["plan1"]
    assert proc.returncode == 0, proc.stderr
    assert provisioned["plan1_unchanged"]
    doc = json_of(proc)
    assert doc["check_mode"] is True
    for name in HOSTS:
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
    # one exact set of inputs: one build, the other hosts take the wheel from the cache
    assert froms[0] == "build" and all(f.startswith("cache:") for f in froms[1:]), froms
    # The builder ran exactly the build Steps plan listed for it (ops/compile.plan_build).
    [builder] = [
        n for n, h in doc["hosts"].items() if h["packages"]["minikernel"]["wheel_from"] == "build"
    ]
    ran = next(s for s in doc["hosts"][builder]["steps"] if s["name"] == "wheel:minikernel")
    planned = json_of(provisioned["plan1"])["hosts"][builder]["steps"]
    assert (
        ran["commands"] == next(s for s in planned if s["name"] == "wheel:minikernel")["commands"]
    )
    for name, host in doc["hosts"].items():
        assert host["status"] == "changed", (name, host["error"])
        steps = {s["name"]: s["status"] for s in host["steps"]}
        assert steps["install:minikernel"] == "changed"
        assert steps["smoke"] == "ok"
        # Exactly the +cpu build, from the find-links the hosts were given.
        assert host["env"]["torch_version"] == "2.13.0+cpu"
        assert host["smoke"]["reused"] is False
        assert host["packages"]["minikernel"]["smoke"]["reused"] is False
    assert "RECAP" in proc.stderr


def test_second_provision_reports_zero_changed(provisioned: dict[str, Any]) -> None:
    proc = provisioned["run2"]
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    for name, host in doc["hosts"].items():
        assert host["status"] == "ok", (name, host["steps"])
        assert host["changed"] == 0
        assert all(s["status"] == "ok" for s in host["steps"])
        # Nothing the verdict depends on changed: smoke was not run again.
        assert host["smoke"]["reused"] is True, host["smoke"]
        verdict = host["packages"]["minikernel"]["smoke"]
        assert verdict["reused"] is True and verdict["status"] == "pass", verdict
        smoke = next(s for s in host["steps"] if s["name"] == "smoke")
        assert smoke["message"].startswith("reused the verdict of")
    assert doc["summary"]["changed"] == 0


def test_another_installed_build_is_smoked_again(provisioned: dict[str, Any]) -> None:
    proc = provisioned["run3"]
    assert proc.returncode == 0, proc.stderr
    hosts = json_of(proc)["hosts"]
    assert hosts["local"]["smoke"]["reused"] is False  # its installed files changed
    assert hosts["local"]["packages"]["minikernel"]["smoke"]["status"] == "pass"
    assert all(hosts[name]["smoke"]["reused"] is True for name in FLEET_HOSTS)
    for host in hosts.values():
        assert host["changed"] == 0


def test_recheck_always_runs_the_checks(provisioned: dict[str, Any]) -> None:
    proc = provisioned["recheck"]
    assert proc.returncode == 0, proc.stderr
    host = json_of(proc)["hosts"]["gpu3"]
    assert host["smoke"]["reused"] is False and host["changed"] == 0
    assert host["packages"]["minikernel"]["smoke"]["status"] == "pass"


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


def test_smoke_memo_keys_on_what_the_verdict_depends_on(tmp_path: Path) -> None:
    """remote/smoke_memo.py on a venv-shaped directory: RECORD, marker and context decide."""
    from sm120kit.remote import smoke_memo

    env = tmp_path / "env"
    info = env / "lib" / "python3.11" / "site-packages" / "sgl_kernel-0.3.21+sm120.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text("sgl_kernel/__init__.py,sha256=AAAA,10\n")
    (env / ".sm120kit-env.json").write_text('{"spec": {}}')
    args = {
        "action": "check",
        "env": str(env),
        "marker": ".sm120kit-env.json",
        "packages": ["sgl-kernel"],
        "memo_dir": str(tmp_path / "memo"),
        "context": {"code": "c1", "arch": ["12.0"], "gpus": []},
    }
    first = smoke_memo.check(args)
    assert first["key"] and first["memo"] is None
    smoke_memo.store({"memo_dir": args["memo_dir"], "key": first["key"], "doc": {"x": 1}})
    assert smoke_memo.check(args)["memo"] == {"x": 1}
    # Another build of the same version: its RECORD differs, so does the key.
    (info / "RECORD").write_text("sgl_kernel/__init__.py,sha256=BBBB,10\n")
    other = smoke_memo.check(args)
    assert other["key"] != first["key"] and other["memo"] is None
    # Another probe, arch or GPU set: another key.
    declared = {"sgl-kernel": {"not_for_arch": {"flash_ops": "FA3: Hopper only"}}}
    for change in (
        {"code": "c2"},
        {"arch": ["12.1"]},
        {"gpus": ["12.0"]},
        {"declarations": declared},
    ):
        changed = smoke_memo.check({**args, "context": {**args["context"], **change}})
        assert changed["key"] not in (first["key"], other["key"])
    # Nothing to fingerprint (package absent): never a key, never a memo.
    assert smoke_memo.check({**args, "packages": ["flash-attn"]})["key"] is None

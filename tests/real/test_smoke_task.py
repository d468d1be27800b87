"""`invoke smoke` over the SSH fleet and locally, against real broken builds of real kernels.

The sample kernel (examples/minikernel) is built with real nvcc for each variant: right, not
linked against cudart, for an arch list without 12.0, and without an RPATH into torch; each
goes into its own ``--system-site-packages`` venv (torch 2.13.0 visible). Two cases minikernel
cannot express come from the smoke-probe fixtures (tests/fixtures/smoke/build.py): PTX-only
device code for compute_120, and a .so that needs a symbol of another torch. The fleet hosts
share this filesystem, so a venv under a tmp dir is reachable from gpu1's sshd.

Only the GPU is simulated (fleet hosts' nvidia-smi stubs): the GPU op check skips because the
CPU torch has no CUDA, which the tests assert.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import Sm120Error
from sm120kit.inventory.host import Host
from sm120kit.plays import smoke as smoke_ops
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.sample_wheel import build_sample_wheel, install_into_venv, nvcc_available

needs_nvcc = pytest.mark.skipif(
    not (nvcc_available() and shutil.which("g++")), reason="needs nvcc and g++ to build kernels"
)

#: Fleet host with a (simulated) RTX PRO 6000 on driver 580: recipe r580 resolves.
GPU_HOST = "gpu1"
HOSTS = f"{GPU_HOST},local"


@dataclass(frozen=True)
class Envs:
    """The venvs the variants are installed into (one per variant) and the fixture venv."""

    good: Path
    nocudart: Path
    sm90: Path
    norpath: Path
    fixtures: Path  # smoke-ptx, smoke-oldtorch, ... (tests/fixtures/smoke/build.py)
    good_wheel: Path


@pytest.fixture(scope="session")
def envs(tmp_path_factory: pytest.TempPathFactory, smoke_fixtures: Any) -> Envs:
    """Build the four minikernel variants (cached across sessions) and the smoke fixtures."""
    if not (nvcc_available() and shutil.which("g++")):
        pytest.skip("needs nvcc and g++ to build kernels")
    root = tmp_path_factory.mktemp("smoke-envs")
    variants = {
        "good": build_sample_wheel(),
        "nocudart": build_sample_wheel(extra_env={"MINIKERNEL_CUDART": "none"}),
        "sm90": build_sample_wheel(arch_list="9.0"),
        "norpath": build_sample_wheel(extra_env={"MINIKERNEL_NO_TORCH_RPATH": "1"}),
    }
    venvs = {}
    for name, wheel in variants.items():
        venvs[name] = root / name
        install_into_venv(wheel.wheel, venvs[name])
    return Envs(
        **venvs,
        fixtures=Path(smoke_fixtures.python).parent.parent,
        good_wheel=variants["good"].wheel,
    )


def smoke(
    fleet: Fleet, tmp: Path, *args: str, hosts: str = HOSTS, json: bool = True
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the real `invoke smoke` on `hosts`; (process, JSON document or {})."""
    argv = ["smoke", "-H", hosts, *args] + (["--json"] if json else [])
    proc = run_invoke(argv, invoke_env(fleet, tmp))
    return proc, (json_of(proc) if json else {})


def checks(host: dict[str, Any], package: str) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in host["packages"][package]["checks"]}


# --- the variants, over SSH and locally -------------------------------------------------------


@needs_nvcc
def test_right_build_passes_and_absent_recipe_packages_skip(
    fleet: Fleet, envs: Envs, tmp_path: Path
) -> None:
    """No --package: the recipe's three packages (or the default three without a recipe)."""
    proc, doc = smoke(fleet, tmp_path, "--python", str(envs.good), "--arch", "12.0")
    assert proc.returncode == 0, proc.stderr
    for name in (GPU_HOST, "local"):
        host = doc["hosts"][name]
        assert host["status"] == "ok", host["error"]
        # gpu1's r580 lists three (its sgl-kernel is the stack's 0.4.10, from the lock);
        # `local` has no recipe here: the default three
        want = ["flash-attn", "minikernel", "sgl-kernel"]
        assert sorted(host["packages"]) == want
        mk = checks(host, "minikernel")
        assert host["packages"]["minikernel"]["status"] == "pass"
        assert mk["import_order"]["status"] == "pass"
        assert mk["undefined_symbols"]["status"] == "pass"
        assert mk["arch_coverage"]["status"] == "pass"
        assert "sm_120 runs on 12.0" in mk["arch_coverage"]["reason"]
        for absent in [p for p in want if p != "minikernel"]:
            assert host["packages"][absent]["status"] == "skip"
            [check] = host["packages"][absent]["checks"]
            assert check["check"] == "installed" and "not installed" in check["reason"]
        # The probe's own JSON, whole: the venv's interpreter, its torch, the arch judged.
        assert host["smoke"]["python"] == str(envs.good / "bin" / "python")
        assert host["smoke"]["torch"]["version"].startswith("2.13.0")
        assert host["smoke"]["arch"] == "12.0" and host["arch_source"] == "--arch"
        assert host["smoke"]["packages"]["minikernel"]["installed"] is True
        assert host["python_source"] == "--python"
        # The wheel's build record, per package, and the torch it names beside the env's.
        mk_pkg = host["packages"]["minikernel"]
        assert mk_pkg["provenance"]["arch_list"] == ["12.0"]
        assert mk_pkg["provenance"]["gencodes"] == ["sm_120"]
        assert mk_pkg["torch"]["built_for_source"] == "build record sm120kit-build.json"
        assert mk_pkg["torch"]["built_for"] == mk_pkg["torch"]["installed"]
        assert host["packages"]["flash-attn"].get("provenance") is None
    # gpu1 has a (simulated) GPU: the op is asked for, and skips on the CPU torch.
    gpu = checks(doc["hosts"][GPU_HOST], "minikernel")["gpu_op"]
    assert gpu["status"] == "skip" and "is_available() is False" in gpu["reason"]
    # gpu1's recipe resolves; `local` has no driver or target_driver here: no recipe needed.
    assert doc["hosts"][GPU_HOST]["recipe"] == "r580"
    recipe_step = next(s for s in doc["hosts"]["local"]["steps"] if s["name"] == "recipe")
    assert recipe_step["status"] == "skipped" and "--python given" in recipe_step["message"]


@needs_nvcc
def test_not_linked_against_cudart_fails(fleet: Fleet, envs: Envs, tmp_path: Path) -> None:
    proc, doc = smoke(
        fleet, tmp_path, "--python", str(envs.nocudart), "--package", "minikernel", "--arch", "12.0"
    )
    assert proc.returncode == 2
    for name in (GPU_HOST, "local"):
        host = doc["hosts"][name]
        assert host["status"] == "failed"
        assert host["packages"]["minikernel"]["status"] == "fail"
        mk = checks(host, "minikernel")
        assert mk["undefined_symbols"]["status"] == "fail"
        assert "not linked against cudart" in mk["undefined_symbols"]["reason"]
        # What the real loader said, importing the extension after torch.
        assert "undefined symbol: __cudaPushCallConfiguration" in mk["import_order"]["reason"]
        assert host["error"].startswith("smoke failed: minikernel: ")
        assert "not linked against cudart" in host["error"]
        assert "\n" not in host["error"]


@needs_nvcc
def test_arch_list_without_12_0_fails(fleet: Fleet, envs: Envs, tmp_path: Path) -> None:
    proc, doc = smoke(
        fleet, tmp_path, "--python", str(envs.sm90), "--package", "minikernel", "--arch", "12.0"
    )
    assert proc.returncode == 2
    for name in (GPU_HOST, "local"):
        host = doc["hosts"][name]
        arch = checks(host, "minikernel")["arch_coverage"]
        assert arch["status"] == "fail"
        assert "has sm_90" in arch["reason"] and "no kernel image" in arch["reason"]
        assert host["error"].startswith("smoke failed: minikernel: ")


@needs_nvcc
def test_ptx_only_warns_and_exits_zero(fleet: Fleet, envs: Envs, tmp_path: Path) -> None:
    """compute_120 PTX and no SASS: it runs after a JIT, so a warn, and the host stays ok."""
    proc, doc = smoke(
        fleet, tmp_path, "--python", str(envs.fixtures), "--package", "smoke-ptx", "--arch", "12.0"
    )
    assert proc.returncode == 0, proc.stderr
    for name in (GPU_HOST, "local"):
        host = doc["hosts"][name]
        assert host["status"] == "ok"
        assert host["packages"]["smoke-ptx"]["status"] == "warn"
        arch = checks(host, "smoke-ptx")["arch_coverage"]
        assert arch["status"] == "warn" and "only PTX compute_120" in arch["reason"]


@needs_nvcc
def test_built_against_another_torch_fails(fleet: Fleet, envs: Envs, tmp_path: Path) -> None:
    proc, doc = smoke(
        fleet,
        tmp_path,
        *("--python", str(envs.fixtures / "bin" / "python"), "--package", "smoke-oldtorch"),
        "--arch",
        "12.0",
    )
    assert proc.returncode == 2
    for name in (GPU_HOST, "local"):
        host = doc["hosts"][name]
        undefined = checks(host, "smoke-oldtorch")["undefined_symbols"]
        assert undefined["status"] == "fail"
        assert "torch" in undefined["reason"] and "2.13.0" in undefined["reason"]
        assert host["smoke"]["packages"]["smoke-oldtorch"]["requires_torch"] == "==2.9.1"
        assert host["error"].startswith("smoke failed: smoke-oldtorch: ")


@needs_nvcc
def test_no_rpath_into_torch(fleet: Fleet, envs: Envs, tmp_path: Path) -> None:
    """Loads after `import torch` (the package does that first), not alone: a warn."""
    proc, doc = smoke(
        fleet, tmp_path, "--python", str(envs.norpath), "--package", "minikernel", "--arch", "12.0"
    )
    assert proc.returncode == 0, proc.stderr
    for name in (GPU_HOST, "local"):
        host = doc["hosts"][name]
        order = checks(host, "minikernel")["import_order"]
        assert order["status"] == "warn", order
        assert "libc10.so" in order["reason"]
        assert checks(host, "minikernel")["undefined_symbols"]["status"] == "pass"
        [ext] = host["smoke"]["packages"]["minikernel"]["extensions"]
        assert not any("torch" in p for p in ext["rpath"] + ext["runpath"])


@needs_nvcc
def test_table_output(fleet: Fleet, envs: Envs, tmp_path: Path) -> None:
    """Without --json: one row per check with status and reason, per host."""
    proc, _ = smoke(
        fleet,
        tmp_path,
        *("--python", str(envs.nocudart), "--package", "minikernel", "--arch", "12.0"),
        hosts="local",
        json=False,
    )
    assert proc.returncode == 2
    out = proc.stdout
    assert f"local: {envs.nocudart / 'bin' / 'python'} (--python)" in out
    assert "arch 12.0 from --arch" in out
    rows = {line.split("│")[2].strip(): line for line in out.splitlines() if "│ minikernel" in line}
    assert set(rows) >= {"import_order", "undefined_symbols", "arch_coverage", "loader", "gpu_op"}
    assert "fail" in rows["undefined_symbols"] and "pass" in rows["arch_coverage"]
    assert "undefined __cudaPushCallConfiguration" in out  # the per-.so problem lines
    assert "cause cudart_not_linked: not linked against cudart" in out
    assert re.search(r"minikernel 0\.1\.0: built for torch \S+ \(build record", out)
    assert "smoke failed: minikernel:" in proc.stderr  # the recap


# --- which env, which packages, which arch ------------------------------------------------------


def test_missing_managed_env_names_python_flag(fleet: Fleet, tmp_path: Path) -> None:
    """Without --python, a host whose provision is the stack alone (r580's default) has its
    serving stack env checked, the one `provision` makes; smoke never creates it."""
    proc, doc = smoke(fleet, tmp_path, hosts=GPU_HOST)
    assert proc.returncode == 2
    host = doc["hosts"][GPU_HOST]
    work_root = str(fleet.by_name(GPU_HOST).work_root)
    # plays/stack.py's layout: <work_root>/envs/stack-<lock label>
    assert re.fullmatch(
        re.escape(work_root) + r"/envs/stack-sglang-[\d.]+-cp3\d+-manylinux_\d+_\d+_x86_64",
        host["env"],
    ), host["env"]
    assert host["error"].startswith(
        f"smoke failed: the serving stack env {host['env']} does not exist"
    )
    assert "--python" in host["error"] and "\n" not in host["error"]
    assert not Path(host["env"]).exists()


def test_host_without_recipe_needs_python(fleet: Fleet, tmp_path: Path) -> None:
    """gpu3 has no GPU and no target_driver: no recipe, so only --python can check it."""
    proc, doc = smoke(fleet, tmp_path, hosts="gpu3")
    assert proc.returncode == 2
    error = doc["hosts"]["gpu3"]["error"]
    assert "target driver unknown" in error and "--python PATH" in error

    proc, doc = smoke(fleet, tmp_path, "--python", sys.executable, hosts="gpu3")
    assert proc.returncode == 0, proc.stderr
    host = doc["hosts"]["gpu3"]
    assert sorted(host["packages"]) == sorted(smoke_ops.DEFAULT_PACKAGES)
    assert host["arch"] is None and host["smoke"]["arch_source"] == "none"


def test_bad_python_and_named_absent_package_fail(fleet: Fleet, tmp_path: Path) -> None:
    proc, doc = smoke(fleet, tmp_path, "--python", str(tmp_path / "no-such-venv"), hosts=GPU_HOST)
    assert proc.returncode == 2
    assert doc["hosts"][GPU_HOST]["error"] == (
        f"smoke failed: no Python interpreter at {tmp_path / 'no-such-venv'} (does not exist)"
    )
    proc, doc = smoke(
        fleet, tmp_path, "--python", sys.executable, "--package", "flash-attn", hosts="local"
    )
    assert proc.returncode == 2
    host = doc["hosts"]["local"]
    assert host["packages"]["flash-attn"]["status"] == "fail"
    assert host["error"].startswith("smoke failed: flash-attn: not installed in ")


def test_bad_arch_is_bad_input(fleet: Fleet, tmp_path: Path) -> None:
    proc, doc = smoke(fleet, tmp_path, "--python", sys.executable, "--arch", "twelve")
    assert proc.returncode == 1
    assert doc == {
        "error": "--arch 'twelve': not a compute capability: 'twelve' (e.g. 12.0 or sm_120)",
        "hosts": {},
    }


@pytest.fixture
def managed_env(fleet: Fleet, tmp_path: Path) -> Iterator[Path]:
    """gpu2's default env path (its serving stack env), learnt from a smoke run; removed
    again afterwards."""
    _, doc = smoke(fleet, tmp_path, hosts="gpu2")
    env = Path(doc["hosts"]["gpu2"]["env"])
    assert env.is_relative_to(fleet.by_name("gpu2").work_root)
    yield env
    shutil.rmtree(env, ignore_errors=True)


@needs_nvcc
def test_managed_env_is_checked(
    fleet: Fleet, envs: Envs, managed_env: Path, tmp_path: Path
) -> None:
    """A provisioned env (simulated by installing the wheel there): checked with no flags,
    judged for the GPU's capability from the facts. gpu2's provision is r580's serving stack
    alone (the default), so that env is the serving stack env."""
    install_into_venv(envs.good_wheel, managed_env)
    proc, doc = smoke(fleet, tmp_path, hosts="gpu2")
    assert proc.returncode == 0, proc.stderr
    host = doc["hosts"]["gpu2"]
    assert host["python"] == str(managed_env / "bin" / "python")
    assert host["python_source"] == "serving stack env"
    assert (host["arch"], host["arch_source"]) == ("12.0", "GPU (facts)")
    assert host["packages"]["minikernel"]["status"] == "pass"
    assert host["packages"]["sgl-kernel"]["status"] == "skip"


# --- pure rules -------------------------------------------------------------------------------


def test_arch_order() -> None:
    """smoke's arch: the one rule of sm120kit/recipes/target_arch.py (--arch, host var target_arch,
    the GPU, the recipe), labelled as smoke's JSON reports it. The full table, and that the
    stack and preflight agree, is tests/unit/test_target_arch.py."""
    gpu = {"gpu": {"present": True, "gpus": [{"compute_cap": "12.0"}]}}
    old = {"gpu": {"present": True, "gpus": [{"compute_cap": None}]}}
    target = Host("h", vars={"target_arch": "12.1"})
    bare = Host("h")

    def chosen(flag: str | None, facts: Any, host: Host) -> tuple[str | None, str]:
        arch = smoke_ops.choose_arch(host, facts, flag, None)
        return arch.cc, arch.label

    assert chosen("12.0a", gpu, target) == ("12.0", "--arch")
    assert chosen(None, gpu, target) == ("12.1", "host var target_arch")
    assert chosen(None, old, target) == ("12.1", "host var target_arch")
    assert chosen(None, gpu, bare) == ("12.0", "GPU (facts)")
    assert chosen(None, None, bare)[0] is None
    with pytest.raises(Sm120Error, match="--arch 'x'"):
        chosen("x", None, bare)


def test_failure_line_names_the_cause() -> None:
    packages = smoke_ops.judge_packages(
        {
            "python": "/e/bin/python",
            "packages": {
                "a": {
                    "installed": True,
                    "checks": [
                        {"check": "import_order", "status": "fail", "reason": "ImportError: x"},
                        {"check": "undefined_symbols", "status": "fail", "reason": "no cudart"},
                    ],
                },
                "b": {"installed": True, "checks": [{"check": "loader", "status": "warn"}]},
            },
        },
        ["a", "b", "c"],
        explicit=False,
    )
    assert [p["status"] for p in packages.values()] == ["fail", "warn", "skip"]
    assert smoke_ops.failure(packages) == "a: no cudart"
    assert smoke_ops.rows(packages)[-1] == (
        "c",
        "installed",
        "skip",
        "not installed in /e/bin/python (not in this env)",
    )


def test_recipe_declarations() -> None:
    """What the recipes tell the probe: without a recipe for the host, the first recipe
    listing the package stands in (these are facts about the package)."""
    declared = smoke_ops.declarations(None)
    sgl = declared["sgl-kernel"]
    assert (sgl["recipe"], sgl["version"], sgl["torch"], sgl["arch"]) == (
        "r570",
        "0.3.21",
        "==2.9.1",
        ["12.0"],
    )
    assert set(sgl["not_for_arch"]) == {"flash_ops", "flashmla_ops"}
    assert sgl["not_for_arch"]["flash_ops"].startswith("FA3 (FlashAttention 3), Hopper only")
    assert "no recipe for this host" in sgl["source"]
    assert declared["minikernel"]["not_for_arch"] == {}


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (
            ("not_for_arch = { flash_ops =", 'not_for_arch = { "flash-ops" ='),
            r"shared/packages\.toml:\d+: packages\[3\]\.smoke\.not_for_arch\.flash-ops: "
            r"not an extension module name$",
        ),
        (
            ("not_for_arch = ", "not_for_archs = "),
            r"shared/packages\.toml:\d+: packages\[3\]\.smoke\.not_for_archs: unknown key "
            r"\(did you mean 'not_for_arch'\?\)",
        ),
        (
            ('flashmla_ops = "FlashMLA, Hopper/B200 only: sm_90a, sm_100a"', 'flashmla_ops = ""'),
            r"shared/packages\.toml:\d+: packages\[3\]\.smoke\.not_for_arch\.flashmla_ops: "
            r"must not be empty",
        ),
    ],
)
def test_bad_smoke_declaration_is_one_line(
    tmp_path: Path, edit: tuple[str, str], error: str
) -> None:
    from sm120kit.errors import RecipeError
    from sm120kit.recipes.select import load_recipes

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "recipes", tmp_path / "recipes")
    # sgl-kernel 0.3.21 (r570/r575's) is a shared pin: its entry is named where it is written.
    path = tmp_path / "recipes" / "shared" / "packages.toml"
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(RecipeError) as err:
        load_recipes(tmp_path / "recipes", patches_dir=repo / "patches")
    assert re.search(error, str(err.value)) and "\n" not in str(err.value)


def test_whole_env_run_that_finds_nothing_says_so(tmp_path: Path) -> None:
    """No --package on an env without any known package (a bare venv): an env without kernel
    packages is not broken (exit 0), but smoke says it checked nothing, never a bare ok."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = run_invoke(
        ["smoke", "-H", "local", "--python", str(venv), "--arch", "12.0", "--json"],
        invoke_env(None, tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    host = json_of(proc)["hosts"]["local"]
    assert host["checked"] == "nothing"
    step = next(s for s in host["steps"] if s["name"] == "smoke")
    assert step["message"].startswith("checked nothing: none of ")
    assert "sgl-kernel" in step["message"]
    assert "(nor sglang) is installed in " in step["message"]

"""CUDA toolkit install (pip, runfile, apt) and its matching, checks and idempotence.

Real parts: the loopback sshd fleet, the real `invoke` CLI, real pip installing CUDA 13.1's
nvcc from PyPI and compiling for sm_120 with it, a real HTTP server on 127.0.0.1. Simulated,
because they cannot exist here: NVIDIA's download server and a real 4 GB runfile (a fixture
runfile from tests/fixtures/runfile/make_runfile.py, whose nvcc is a script, is served
instead), a real apt install (needs root and NVIDIA's repo: only its plan is checked), and the
GPUs (the fleet's nvidia-smi stubs).
"""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.errors import HostFailed
from sm120kit.ops import toolkit as tk
from tests.conftest import REPO, invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.sample_wheel import cache_root

RUNFILE = "cuda_12.8.1_570.124.06_linux.run"
RUNFILE_PATH = f"/cuda/12.8.1/local_installers/{RUNFILE}"
CUOBJDUMP = Path(
    "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cu13/bin/cuobjdump"
)


def _fixture_module() -> Any:
    path = REPO / "tests" / "fixtures" / "runfile" / "make_runfile.py"
    spec = importlib.util.spec_from_file_location("make_runfile", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- helpers


class RunfileServer:
    """A loopback HTTP server for the fixture runfile: normal, dropping, or gated (slow)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.mode = "normal"
        self.started = threading.Event()  # gated mode: the first part went out
        self.gate = threading.Event()  # gated mode: send the rest
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests += 1
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if server.mode == "drop":
                        self.wfile.write(body[: len(body) // 2])
                        self.close_connection = True
                        return
                    if server.mode == "gated":
                        self.wfile.write(body[: 256 * 1024])
                        self.wfile.flush()
                        server.started.set()
                        server.gate.wait(60)
                        self.wfile.write(body[256 * 1024 :])
                        return
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def mirror(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/cuda"

    def reset(self) -> None:
        self.mode = "normal"
        self.started.clear()
        self.gate.clear()


@pytest.fixture(scope="module")
def runfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture runfile: CUDA 12.8.1 whose fake nvcc says V12.8.93 (docs/stack-facts.md section 2)."""
    mod = _fixture_module()
    return Path(
        mod.build_runfile(tmp_path_factory.mktemp("runfile"), "12.8.1", "12.8.93", "570.124.06")
    )


@pytest.fixture(scope="module")
def server(runfile: Path) -> Iterator[RunfileServer]:
    srv = RunfileServer({RUNFILE_PATH: runfile.read_bytes()})
    srv.thread.start()
    yield srv
    srv.gate.set()
    srv.httpd.shutdown()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_inventory(tmp: Path, fleet: Fleet, name: str, **host_vars: Any) -> Path:
    """An inventory holding fleet host `name` with a fresh work_root and `host_vars`."""
    h = fleet.by_name(name)
    entry = {**fleet.all_vars(h), "work_root": str(tmp / "work"), **host_vars}
    inv = tmp / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {name: entry}}}))
    return inv


def cli(args: list[str], fleet: Fleet, tmp: Path) -> tuple[int, dict[str, Any]]:
    proc = run_invoke([*args, "--json"], invoke_env(fleet, tmp))
    try:
        doc = json_of(proc)
    except (AssertionError, json.JSONDecodeError):
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}") from None
    return proc.returncode, doc


def step_of(entry: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in entry["steps"] if s["name"] == name)


def tree_hash(root: Path) -> dict[str, str]:
    """Every path under `root` with a hash of its content (or link target)."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def leftovers(work: Path) -> list[str]:
    found = list((work / "toolkits").glob(".cuda-*.tmp-*")) if (work / "toolkits").exists() else []
    if (work / "downloads").exists():
        found += list((work / "downloads").glob(".*.part-*"))
    if (work / "tmp").exists():
        found += list((work / "tmp").glob("nvcc-check-*"))
    return sorted(str(p) for p in found)


def normalise(commands: list[str]) -> list[str]:
    """Commands with their random temp names blanked, to compare a plan with a run."""
    return [re.sub(r"(tmp|part|check)-[0-9a-f]{8}", r"\1-X", c) for c in commands]


# --------------------------------------------------------------------------- pure rules


def test_nvcc_versions_pin_facts() -> None:
    # docs/stack-facts.md section 2 and the brief: nvcc versions are not toolkit versions.
    assert tk.NVCC_VERSIONS["13.0.2"] == "13.0.88"
    assert tk.NVCC_VERSIONS["12.8.1"] == "12.8.93"
    assert tk.NVCC_VERSIONS["12.8.0"] == "12.8.61"
    assert tk.releases_for_nvcc("13.0.88") == ["13.0.1", "13.0.2"]
    assert tk.expected_nvcc("12.8") == "12.8.61"
    assert tk.expected_nvcc("13.2.0") is None
    assert [tk.sm_code(a) for a in ("12.0", "12.0a", "12.0+PTX", "12.0f")] == [
        "sm_120",
        "sm_120a",
        "sm_120",
        "sm_120f",
    ]


def _spec(version: str = "13.0.2", method: str = "pip", gcc_max: int = 15) -> tk.ToolkitSpec:
    return tk.ToolkitSpec(
        version=version,
        release=".".join(version.split(".")[:2]),
        method=method,
        prefix=f"/w/toolkits/cuda-{version}",
        nvcc_version=tk.expected_nvcc(version),
        arch=("12.0",),
        gcc_max=gcc_max,
        gcc_max_source="recipes/r580.toml",
        pip_packages=("nvidia-cuda-nvcc==13.0.*",),
        url="",
        sha256="",
        sha256_source="unknown",
        runfile="",
        apt_packages=("cuda-nvcc-13-0", "cuda-cudart-dev-13-0", "cuda-cccl-13-0"),
        mirror="https://developer.download.nvidia.com/compute/cuda",
        work_root="/w",
    )


def _entry(path: str, version: str, nvcc: str, source: str = "system") -> dict[str, Any]:
    return {
        "path": path,
        "source": source,
        "version": version,
        "nvcc": f"{path}/bin/nvcc",
        "nvcc_release": ".".join(nvcc.split(".")[:2]),
        "nvcc_version": nvcc,
    }


def test_system_toolkit_of_the_same_release_serves_the_recipe() -> None:
    # This machine's /usr/local/cuda-13.0 has no version.json: facts report nvcc's 13.0.88.
    facts = {"cuda": [_entry("/usr/local/cuda-13.0", "13.0.88", "13.0.88")]}
    found, _ = tk.find_toolkit(facts, _spec("13.0.2"), "580.95.05")
    assert found is not None and found.cuda_home == "/usr/local/cuda-13.0"
    # V13.0.88 first shipped with 13.0.1, which a 580.82.07 driver runs.
    assert tk.find_toolkit(facts, _spec("13.0.1"), "580.82.07")[0] is not None
    # Another release never matches.
    found, rejected = tk.find_toolkit(facts, _spec("13.1.1"), "590.48.01")
    assert found is None and "CUDA 13.0, not 13.1" in rejected[0]


def test_toolkit_the_driver_cannot_run_is_passed_over() -> None:
    facts = {"cuda": [_entry("/opt/cuda-13.0", "13.0.2", "13.0.88")]}  # version.json: 13.0.2
    found, rejected = tk.find_toolkit(facts, _spec("13.0.1"), "580.82.07")
    assert found is None
    assert "13.0.2 needs driver >= 580.95.05" in rejected[0]
    # Unknown driver (a forced recipe): the release alone decides.
    assert tk.find_toolkit(facts, _spec("13.0.1"), None)[0] is not None


def test_exact_work_root_toolkit_wins() -> None:
    facts = {
        "cuda": [
            _entry("/usr/local/cuda-12.8", "12.8.61", "12.8.61"),
            _entry("/w/toolkits/cuda-12.8.1", "12.8.1", "12.8.93", "work_root"),
            {"path": "/x", "source": "PATH", "version": "12.8.1", "nvcc": None},
        ]
    }
    found, rejected = tk.find_toolkit(facts, _spec("12.8.1", "runfile", 14), "570.124.06")
    assert found is not None and found.cuda_home == "/w/toolkits/cuda-12.8.1"
    assert found.version == "12.8.1" and found.source == "work_root"
    assert any("no nvcc" in r for r in rejected)


def test_gcc_above_the_ceiling_names_the_fix() -> None:
    gccs = [{"path": "/usr/bin/gcc", "version": "12.2.0"}]
    facts: dict[str, Any] = {"gcc": gccs, "glibc": "2.36"}
    what, problem = tk.host_compiler_problem(facts, _spec(gcc_max=10))
    assert problem is not None
    assert (
        "GCC 12.2.0" in problem and "ceiling GCC 10" in problem and "recipes/r580.toml" in problem
    )
    assert (
        "g++-10" in problem and "nvcc_ccbin" in problem and "-allow-unsupported-compiler" in problem
    )
    # A second gcc under the ceiling is the fix.
    gccs.append({"path": "/usr/bin/gcc-9", "version": "9.5.0"})
    _, problem = tk.host_compiler_problem(facts, _spec(gcc_max=10))
    assert problem is not None and "nvcc_ccbin: /usr/bin/gcc-9" in problem
    # ... and once chosen, it passes.
    what, problem = tk.host_compiler_problem(facts, _spec(gcc_max=10), "/usr/bin/g++-9")
    assert problem is None and "gcc-9" in what
    assert tk.host_compiler_problem({"gcc": []}, _spec())[1] is not None


def test_glibc_241_clashes_with_cuda_128_headers() -> None:
    facts = {"gcc": [{"path": "/usr/bin/gcc", "version": "14.2.0"}], "glibc": "2.41"}
    _, problem = tk.host_compiler_problem(facts, _spec("12.8.1", "runfile", 14))
    assert problem is not None and "glibc 2.41" in problem and "cospi" in problem
    assert tk.host_compiler_problem(facts, _spec("13.0.2"))[1] is None
    facts["glibc"] = "2.39"
    assert tk.host_compiler_problem(facts, _spec("12.9.1", "runfile", 14))[1] is None


@pytest.mark.parametrize(
    ("os_id", "version_id", "distro"),
    [
        ("debian", "12", "debian12"),
        ("ubuntu", "22.04", "ubuntu2204"),
        ("ubuntu", "24.04", "ubuntu2404"),
    ],
)
def test_apt_commands(os_id: str, version_id: str, distro: str) -> None:
    facts = {"os": {"id": os_id, "version_id": version_id}, "arch": "x86_64", "user": "deploy"}
    got = tk.apt_distro(facts)
    assert got == (distro, "x86_64")
    spec = _spec("13.0.2", "apt")
    assert spec.prefix.startswith("/w/")  # a hand-made spec; from_state puts apt in /usr/local
    for has_password, sudo in ((True, "sudo -S -p '' "), (False, "sudo -n ")):
        assert tk.sudo_prefix(facts, has_password) == sudo
        plan = tk.install_plan(
            spec, python="python3", token="0" * 8, host_vars={}, distro=distro, sudo=sudo
        )
        text = "\n".join(plan.commands)
        keyring = f"https://developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64/cuda-keyring_1.1-1_all.deb"
        assert keyring in text
        assert f"{sudo}dpkg -i /w/downloads/cuda-keyring_1.1-1_all.deb" in plan.commands
        assert f"{sudo}apt-get update" in plan.commands
        assert plan.commands[4] == (
            f"{sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
            "cuda-nvcc-13-0 cuda-cudart-dev-13-0 cuda-cccl-13-0"
        )
        assert any(
            c.endswith("--generate-code=arch=compute_120,code=sm_120") for c in plan.commands
        )
    assert tk.sudo_prefix({**facts, "user": "root"}, True) == ""
    with pytest.raises(HostFailed, match="debian 12"):
        tk.apt_distro(
            {"os": {"id": "fedora", "version_id": "41", "pretty": "Fedora 41"}, "arch": "x86_64"}
        )


def test_pip_constraints_pin_nvcc_companions() -> None:
    # Unpinned, pip takes nvidia-nvvm 13.5 for a 13.1 nvcc and ptxas rejects its PTX.
    assert tk.pip_constraints(_spec("13.1.1")) == [
        "nvidia-cuda-nvcc==13.1.115",
        "nvidia-nvvm==13.1.115",
        "nvidia-cuda-crt==13.1.115",
    ]
    assert tk.pip_constraints(_spec("13.2.0")) == ["nvidia-nvvm==13.2.*", "nvidia-cuda-crt==13.2.*"]


# --------------------------------------------------------------------------- runfile over SSH


RUNFILE_ARGS = ["-H", "gpu2"]  # RTX 5090 on 570.124.06: recipe r570, CUDA 12.8.1 by runfile


def test_runfile_install_idempotent_and_plan_changes_nothing(
    fleet: Fleet, tmp_path: Path, server: RunfileServer, runfile: Path
) -> None:
    server.reset()
    work = tmp_path / "work"
    inv = write_inventory(
        tmp_path,
        fleet,
        "gpu2",
        **{
            "recipe.cuda.mirror": server.mirror,
            "recipe.cuda.sha256": sha256_of(runfile),
            "recipe.torch.index": "pypi",
            "recipe.torch.version": "2.13.0",
            "recipe.torch.cuda": "cpu",
            "allow_cpu_torch": True,
            "provision_packages": ["minikernel"],
            "provision_stack": False,
        },
    )
    # plan first: would install, with the exact commands; nothing on the host changes.
    before = tree_hash(work)
    code, doc = cli(["plan", *RUNFILE_ARGS, "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu2"]
    assert tree_hash(work) == before
    toolkit_step = step_of(entry, "toolkit")
    assert toolkit_step["status"] == "changed", entry
    assert toolkit_step["message"].startswith("would install CUDA 12.8.1 (runfile) into ")
    planned = toolkit_step["commands"]
    assert f"download {server.mirror}/12.8.1/local_installers/{RUNFILE}" in planned[2]
    assert f"--silent --toolkit --toolkitpath={work}/toolkits/.cuda-12.8.1.tmp-" in planned[3]
    assert server.requests == 0

    # install: the runfile is downloaded, checked, installed into a temp dir, verified, renamed.
    code, doc = cli(["install-cuda", *RUNFILE_ARGS, "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu2"]
    assert code == 0, entry
    assert entry["status"] == "changed" and entry["changed"] == 1
    step = step_of(entry, "toolkit")
    assert "installed CUDA 12.8.1 (runfile)" in step["message"] and "V12.8.93" in step["message"]
    assert normalise(step["commands"]) == normalise(planned)  # what ran is what plan showed
    prefix = work / "toolkits" / "cuda-12.8.1"
    assert entry["toolkit"] == {
        "version": "12.8.1",
        "release": "12.8",
        "nvcc_version": "12.8.93",
        "cuda_home": str(prefix),
        "nvcc": str(prefix / "bin" / "nvcc"),
        "source": "work_root",
    }
    assert json.loads((prefix / "version.json").read_text())["cuda"]["version"] == "12.8.1"
    assert leftovers(work) == []
    assert server.requests == 1

    # again: found, nothing runs but facts and the host lock.
    code, doc = cli(["install-cuda", *RUNFILE_ARGS, "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu2"]
    assert code == 0 and entry["status"] == "ok" and entry["changed"] == 0, entry
    assert step_of(entry, "toolkit")["message"].startswith(f"CUDA 12.8.1 at {prefix} (work_root")
    assert entry["commands"] == 3  # facts, lock acquire, lock release
    assert "install_cuda" not in Path(entry["log"]).read_text()
    assert server.requests == 1

    # plan again: the toolkit step is ok and the work_root is byte for byte the same.
    before = tree_hash(work)
    code, doc = cli(["plan", *RUNFILE_ARGS, "-i", str(inv)], fleet, tmp_path)
    assert step_of(doc["hosts"]["gpu2"], "toolkit")["status"] == "ok"
    assert tree_hash(work) == before


def test_bad_checksum_is_refused(fleet: Fleet, tmp_path: Path, server: RunfileServer) -> None:
    server.reset()
    work = tmp_path / "work"
    inv = write_inventory(
        tmp_path,
        fleet,
        "gpu7",
        **{"recipe.cuda.mirror": server.mirror, "recipe.cuda.sha256": "0" * 64},
    )
    code, doc = cli(["install-cuda", "-H", "gpu7", "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu7"]
    assert code == 2 and entry["status"] == "failed"
    assert "sha256 mismatch" in entry["error"] and "expected " + "0" * 64 in entry["error"]
    assert "recipe.cuda.sha256" in entry["error"]  # names where the value came from
    assert not (work / "toolkits" / "cuda-12.8.1").exists()
    assert leftovers(work) == []


def test_dropped_download_leaves_nothing(
    fleet: Fleet, tmp_path: Path, server: RunfileServer
) -> None:
    server.reset()
    server.mode = "drop"
    work = tmp_path / "work"
    inv = write_inventory(tmp_path, fleet, "gpu7", **{"recipe.cuda.mirror": server.mirror})
    code, doc = cli(["install-cuda", "-H", "gpu7", "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu7"]
    assert code == 2 and "download of" in entry["error"]
    assert "connection closed after" in entry["error"]
    assert not (work / "toolkits" / "cuda-12.8.1").exists()
    assert leftovers(work) == []


def _remote_pid(marker: str, timeout: float = 30) -> int:
    """The pid of the remote install script downloading under `marker`: the process holding
    a ``.part-`` file there open (its arguments travel on stdin, not on its command line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                targets = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
            except OSError:
                continue
            if any(t.startswith(marker) and ".part-" in t for t in targets):
                return int(proc.name)
        time.sleep(0.1)
    raise AssertionError(f"no remote install process for {marker}")


def test_killed_download_is_cleaned_by_the_next_run(
    fleet: Fleet, tmp_path: Path, server: RunfileServer, runfile: Path
) -> None:
    server.reset()
    server.mode = "gated"
    work = tmp_path / "work"
    inv = write_inventory(
        tmp_path,
        fleet,
        "gpu7",
        **{"recipe.cuda.mirror": server.mirror, "recipe.cuda.sha256": sha256_of(runfile)},
    )
    env = invoke_env(fleet, tmp_path)
    args = [
        sys.executable,
        "-m",
        "invoke",
        "--search-root",
        str(REPO),
        "install-cuda",
        "-H",
        "gpu7",
    ]
    proc = subprocess.Popen(
        [*args, "-i", str(inv), "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.started.wait(60), "the download never started"
        # SIGKILL: the script gets no chance to clean up, like a power cut on the host.
        os.kill(_remote_pid(str(work)), signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        server.gate.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    entry = json.loads(out)["hosts"]["gpu7"]
    assert entry["status"] == "failed" and "install_cuda" in entry["error"]
    assert not (work / "toolkits" / "cuda-12.8.1").exists()
    left = leftovers(work)
    assert any(".part-" in p for p in left) and any(".tmp-" in p for p in left)
    # The facts probe does not take the leftovers for a toolkit.
    code, doc = cli(["facts", "-H", "gpu7", "-i", str(inv)], fleet, tmp_path)
    assert not [t for t in doc["hosts"]["gpu7"]["facts"]["cuda"] if t["source"] == "work_root"]

    server.reset()
    code, doc = cli(["install-cuda", "-H", "gpu7", "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu7"]
    assert code == 0 and entry["status"] == "changed", entry
    assert (work / "toolkits" / "cuda-12.8.1" / "bin" / "nvcc").exists()
    assert leftovers(work) == []


def test_gcc_above_ceiling_is_caught_before_install(
    fleet: Fleet, tmp_path: Path, server: RunfileServer
) -> None:
    server.reset()
    work = tmp_path / "work"
    inv = write_inventory(
        tmp_path, fleet, "gpu7", **{"recipe.cuda.mirror": server.mirror, "recipe.cuda.gcc_max": 10}
    )
    code, doc = cli(["install-cuda", "-H", "gpu7", "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu7"]
    assert code == 2
    assert step_of(entry, "host-compiler")["status"] == "failed"
    assert not any(s["name"] == "toolkit" for s in entry["steps"])
    assert "ceiling GCC 10" in entry["error"] and "recipe.cuda.gcc_max" in entry["error"]
    assert "g++-10" in entry["error"] and "-allow-unsupported-compiler" in entry["error"]
    assert not (work / "toolkits").exists()


# --------------------------------------------------------------------------- system, apt, pip


@pytest.mark.skipif(not Path("/usr/local/cuda-13.0/bin/nvcc").exists(), reason="no CUDA 13.0")
def test_system_cuda_130_serves_r580(fleet: Fleet, tmp_path: Path) -> None:
    """For the sample kernel: this machine's CUDA 13.0 has nvcc but not cuBLAS & co, which only
    the CUDA-torch builds need (test_cuda_libraries.py)."""
    inv = write_inventory(tmp_path, fleet, "gpu1", provision_packages=["minikernel"])
    code, doc = cli(["install-cuda", "-H", "gpu1", "-i", str(inv)], fleet, tmp_path)
    entry = doc["hosts"]["gpu1"]
    assert code == 0 and entry["changed"] == 0, entry
    assert entry["toolkit"]["cuda_home"] == "/usr/local/cuda-13.0"
    assert entry["toolkit"]["nvcc_version"] == "13.0.88"
    assert "serves CUDA 13.0.2" in step_of(entry, "toolkit")["message"]
    assert not (tmp_path / "work" / "toolkits").exists()


def test_apt_plan_over_ssh(fleet: Fleet, tmp_path: Path) -> None:
    """The fleet hosts are this Debian 12 machine; the apt install itself is not run here."""
    work = tmp_path / "work"
    inv = write_inventory(tmp_path, fleet, "gpu1", **{"recipe.cuda.method": "apt"})
    before = tree_hash(work)
    code, doc = cli(
        ["plan", "-H", "gpu1", "--driver", "590.48.01", "-i", str(inv)], fleet, tmp_path
    )
    entry = doc["hosts"]["gpu1"]
    step = step_of(entry, "toolkit")
    assert step["message"] == (
        "would install CUDA 13.1.1 (apt) into /usr/local/cuda-13.1; needs nvcc and CUDA headers "
        "only (no build of this run links its libraries)"
    )
    text = "\n".join(step["commands"])
    assert "/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb" in text
    assert (
        "apt-get install -y --no-install-recommends cuda-nvcc-13-1 cuda-cudart-dev-13-1 cuda-cccl-13-1"
        in text
    )
    assert "/usr/local/cuda-13.1/bin/nvcc --version" in text
    assert tree_hash(work) == before


def test_pip_install_of_cuda_131_compiles_for_sm120(fleet: Fleet, tmp_path: Path) -> None:
    """Real pip: nvidia-cuda-nvcc/-runtime/-cccl 13.1 from PyPI (pip's cache kept across runs)."""
    work = tmp_path / "work"
    pip_cache = cache_root() / "pip"
    inv = write_inventory(tmp_path, fleet, "gpu1", pip_cache_dir=str(pip_cache))
    args = ["install-cuda", "-H", "gpu1", "--driver", "590.48.01", "--arch", "12.0", "-i", str(inv)]
    code, doc = cli(args, fleet, tmp_path)
    entry = doc["hosts"]["gpu1"]
    assert code == 0, entry
    step = step_of(entry, "toolkit")
    assert "installed CUDA 13.1.1 (pip)" in step["message"] and "V13.1.115" in step["message"]
    assert any(f"--cache-dir {pip_cache}" in c for c in step["commands"])
    prefix = work / "toolkits" / "cuda-13.1.1"
    assert entry["toolkit"]["cuda_home"] == str(prefix)
    # A CUDA_HOME for torch's cpp_extension: lib64 with libcudart.so, headers, nvcc.
    assert (prefix / "lib64" / "libcudart.so").exists()
    assert (prefix / "include" / "cuda_runtime.h").exists()
    out = subprocess.run(
        [str(prefix / "bin" / "nvcc"), "--version"], capture_output=True, text=True
    )
    assert "release 13.1, V13.1.115" in out.stdout
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    obj = tmp_path / "k.o"
    subprocess.run(
        [str(prefix / "bin" / "nvcc"), "-arch=sm_120", "-c", str(src), "-o", str(obj)], check=True
    )
    if CUOBJDUMP.exists():
        listing = subprocess.run(
            [str(CUOBJDUMP), "-lelf", str(obj)], capture_output=True, text=True
        )
        assert "sm_120" in listing.stdout, listing
    assert leftovers(work) == []

    code, doc = cli(args, fleet, tmp_path)
    entry = doc["hosts"]["gpu1"]
    assert code == 0 and entry["changed"] == 0 and entry["commands"] == 3, entry


def test_fixture_runfile_refuses_interactive_install(runfile: Path, tmp_path: Path) -> None:
    proc = subprocess.run(["sh", str(runfile), "--toolkit"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--silent" in proc.stderr
    proc = subprocess.run(
        ["sh", str(runfile), "--silent", "--toolkit", f"--toolkitpath={tmp_path / 'tk'}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert shutil.which("nvcc", path=str(tmp_path / "tk" / "bin"))

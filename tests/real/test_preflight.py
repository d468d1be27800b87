"""`invoke preflight` over the real SSH fleet, against the real sglang 0.5.23, sglang-kernel
0.4.10 and flashinfer-python 0.7.2 wheels installed --no-deps in a venv (tests/support/
sglang_env.py).

Only the GPU is simulated: each fleet host's stub `nvidia-smi` prints real-format output for
its profile (gpu1: two RTX PRO 6000, compute capability 12.0), and for the GPU-memory test a
profile with another process holding memory. The fatbins read are the wheels' own, the port is
a real socket bound on the host's address, the model path a real directory on the host.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import Sm120Error
from sm120kit.preflight.launch import launch_words, parse_launch
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import PROFILES, Fleet
from tests.support.sglang_env import sglang_venv

LAUNCHER = ["python", "-m", "sglang.launch_server"]


@pytest.fixture(scope="module")
def venv() -> Path:
    """The venv holding the real wheels (built once, cached across sessions)."""
    return sglang_venv()


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    """A local model directory with an MHA config.json and a 1 MiB weights file."""
    path = tmp_path / "Llama-tiny"
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    )
    (path / "model.safetensors").write_bytes(b"\0" * (1 << 20))
    return path


def free_port(address: str) -> int:
    """A port nothing listens on at `address` right now."""
    with socket.socket() as s:
        s.bind((address, 0))
        port: int = s.getsockname()[1]
        return port


def preflight(
    fleet: Fleet, tmp: Path, host: str, venv: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`invoke preflight -H host --python venv --json -- python -m sglang.launch_server ARGS`."""
    argv = ["preflight", "-H", host, "--python", str(venv), "--json", "--", *LAUNCHER, *args]
    proc = run_invoke(argv, invoke_env(fleet, tmp), timeout=300)
    return proc, json_of(proc)


def checks_of(doc: dict[str, Any], host: str) -> dict[str, dict[str, Any]]:
    """The host's preflight checks by name."""
    pre = doc["hosts"][host]["preflight"]
    return {c["check"]: c for c in pre["checks"]}


def test_fa3_on_sm120_is_refused_citing_flash_ops_archs(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """FA3 on gpu1 (simulated 12.0 GPUs): refused from the wheel's own flash_ops fatbin."""
    port = free_port("127.0.0.1")
    proc, doc = preflight(
        fleet, tmp_path, "gpu1", venv,
        "--model-path", str(model), "--attention-backend", "fa3", "--tp", "2",
        "--port", str(port),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    checks = checks_of(doc, "gpu1")
    attn = checks["attention_backend"]
    assert attn["status"] == "fail"
    assert "sgl_kernel/flash_ops.abi3.so" in attn["reason"]
    assert "sm_80, sm_86, sm_90a" in attn["reason"]
    assert attn["fix"].startswith("--attention-backend flashinfer")
    files = attn["evidence"]["files"]
    assert [f["sass"] for f in files] == [["sm_80", "sm_86", "sm_90a"]]
    rule = checks["rule:fa3-no-sm120"]
    assert rule["status"] == "fail" and "sglang 0.5.23" in rule["evidence"]["scope"]
    assert "flash_ops.abi3.so" in rule["evidence"]["source"]
    # Everything else about this launch is fine: only the FA3 verdicts fail.
    failed = {name for name, c in checks.items() if c["status"] == "fail"}
    assert failed == {"attention_backend", "rule:fa3-no-sm120"}
    assert doc["hosts"]["gpu1"]["error"].startswith("attention_backend: ")


def test_flashinfer_passes(fleet: Fleet, venv: Path, model: Path, tmp_path: Path) -> None:
    """The same launch with FlashInfer on gpu1 (simulated 12.0 GPUs) passes every check."""
    port = free_port("127.0.0.1")
    proc, doc = preflight(
        fleet, tmp_path, "gpu1", venv,
        "--model-path", str(model), "--attention-backend", "flashinfer", "--tp", "2",
        "--port", str(port), "--mem-fraction-static", "0.85",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    checks = checks_of(doc, "gpu1")
    # A warning does not fail the host: TP 2 on two PCIe boards runs sglang's custom all-reduce.
    warned = {name for name, c in checks.items() if c["status"] == "warn"}
    assert warned == {"rule:custom-all-reduce-two-pcie-gpus", "kernel_stack"}
    # The venv holds the wheels without their dependencies: no torch, and it says so.
    assert checks["kernel_stack"]["reason"] == ("torch not installed (sglang 0.5.23 pins ==2.14.1)")
    # The venv holds no torch, so sglang's own resolution cannot run there: that check is
    # unknown (issue 44: no pass resting on checks not run), every other passes.
    assert checks["sglang_resolution"]["status"] == "unknown"
    assert "could not run" in checks["sglang_resolution"]["reason"]
    others = {c["status"] for n, c in checks.items() if n != "sglang_resolution"}
    assert others <= {"pass", "skip", "warn"}
    assert checks["attention_backend"]["status"] == "pass"
    assert "flashinfer" in checks["attention_backend"]["reason"]
    assert "sglang 0.5.23" in checks["serving_env"]["reason"]
    assert checks["gpus"]["reason"] == "tp 2 needs 2 of 2 GPU(s)"
    assert (
        checks["model_path"]["status"] == "pass" and "2 file(s)" in checks["model_path"]["reason"]
    )


def test_default_backend_is_computed_from_the_model_config(
    fleet: Fleet, venv: Path, tmp_path: Path
) -> None:
    """No --attention-backend, an MLA config.json (kv_lora_rank) on gpu2 (simulated 5090):
    sglang 0.5.23's default for 12.x MLA models is triton."""
    path = tmp_path / "DeepSeek-tiny"
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"model_type": "deepseek_v3", "kv_lora_rank": 512})
    )
    proc, doc = preflight(
        fleet, tmp_path, "gpu2", venv, "--model-path", str(path),
        "--port", str(free_port("127.0.0.1")),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    attention = doc["hosts"]["gpu2"]["preflight"]["attention"]
    assert attention["prefill"] == attention["decode"] == "triton"
    assert attention["how"] == "sglang default"
    assert "get_default_attn_backend" in attention["note"]


def test_tp_larger_than_the_gpus_is_refused(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """--tp 8 on gpu1, whose stub nvidia-smi lists two GPUs."""
    proc, doc = preflight(
        fleet, tmp_path, "gpu1", venv,
        "--model-path", str(model), "--attention-backend", "flashinfer", "--tp", "8",
        "--port", str(free_port("127.0.0.1")),
    )  # fmt: skip
    assert proc.returncode == 2
    gpus = checks_of(doc, "gpu1")["gpus"]
    assert gpus["status"] == "fail"
    assert gpus["reason"] == "tp 8 needs 8 GPUs, the host has 2"
    assert gpus["evidence"] == {"needed": 8, "present": 2}
    assert doc["hosts"]["gpu1"]["error"] == "gpus: tp 8 needs 8 GPUs, the host has 2"


def test_port_in_use_is_refused(fleet: Fleet, venv: Path, model: Path, tmp_path: Path) -> None:
    """A real socket listening on gpu1's address (127.0.0.2) and the launch's --port."""
    address = fleet.by_name("gpu1").address
    with socket.socket() as server:
        server.bind((address, 0))
        server.listen(1)
        port = server.getsockname()[1]
        proc, doc = preflight(
            fleet, tmp_path, "gpu1", venv,
            "--model-path", str(model), "--attention-backend", "triton",
            "--host", address, "--port", str(port),
        )  # fmt: skip
    assert proc.returncode == 2
    check = checks_of(doc, "gpu1")["port"]
    assert check["status"] == "fail"
    assert check["reason"].startswith(f"port {address}:{port} is already in use")


def test_gpu_memory_held_by_another_process_is_named(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """gpu8's stub nvidia-smi lists an old server (pid 4242) holding 70 GiB on GPU 1, and a
    --mem-fraction-static that no longer fits there."""
    profile = json.loads(json.dumps(PROFILES["pro6000x2"]))
    profile["gpus"][1]["used"] = 71800
    profile["apps"] = [
        {"bus": profile["gpus"][1]["bus"], "pid": 4242, "name": "sglang::scheduler", "mem": 71680}
    ]
    with fleet.gpu_profile("gpu8", profile):
        proc, doc = preflight(
            fleet, tmp_path, "gpu8", venv,
            "--model-path", str(model), "--tp", "2", "--mem-fraction-static", "0.88",
            "--port", str(free_port("127.0.0.1")),
        )  # fmt: skip
    assert proc.returncode == 2
    checks = checks_of(doc, "gpu8")
    held = checks["gpu_memory"]
    assert held["status"] == "fail"
    assert held["reason"] == "GPU memory already held: GPU1: pid 4242 sglang::scheduler (71680 MiB)"
    frac = checks["mem_fraction"]
    assert frac["status"] == "fail" and "GPU1: 0.88 x 97887 MiB" in frac["reason"]
    assert checks["gpus"]["status"] == "pass"  # the other checks still judge normally


def test_human_output_has_one_line_per_failed_check(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """Without --json: the checks table, then FAILED lines, exit 2 (gpu1, simulated GPUs)."""
    argv = [
        "preflight", "-H", "gpu1", "--python", str(venv), "--", *LAUNCHER,
        "--model-path", str(model), "--attention-backend", "fa3", "--tp", "8",
        "--port", str(free_port("127.0.0.1")),
    ]  # fmt: skip
    proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=300)
    assert proc.returncode == 2
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED ")]
    assert [line.split(":")[0] for line in failed] == [
        "FAILED attention_backend",
        "FAILED rule",
        "FAILED gpus",
    ]


def test_launch_option_and_bad_input(fleet: Fleet, venv: Path, tmp_path: Path) -> None:
    """--launch "..." works like the words after --; a bad value is one line, exit 1 (no host
    is touched, nothing simulated)."""
    proc = run_invoke(
        ["preflight", "-H", "gpu1", "--python", str(venv), "--json", "--launch",
         "python -m sglang.launch_server --model-path m --tp two"],
        invoke_env(fleet, tmp_path),
    )  # fmt: skip
    assert proc.returncode == 1
    assert json_of(proc)["error"] == "launch option --tp 'two': expected an integer"
    assert "Traceback" not in proc.stderr
    proc = run_invoke(["preflight", "-H", "gpu1", "--json"], invoke_env(fleet, tmp_path))
    assert proc.returncode == 1 and "no launch command" in json_of(proc)["error"]


# ------------------------------------------------------------------ launch parsing (no host)


def test_parse_launch_reads_sglang_spellings() -> None:
    """Spellings and defaults of sglang 0.5.23's server args (nothing simulated)."""
    launch = parse_launch(
        ["python3", "-m", "sglang.launch_server", "--model", "m", "--tensor-parallel-size=4",
         "--dp", "2", "--enable-dp-attention", "--decode-attention-backend", "triton",
         "--trust-remote-code", "--mem-fraction-static", "0.9"]
    )  # fmt: skip
    assert (launch.model_path, launch.tp, launch.dp, launch.port) == ("m", 4, 2, 30000)
    assert launch.gpus_needed() == 4  # DP attention runs inside the TP group
    assert launch.decode_attention_backend == "triton" and launch.mem_fraction_static == 0.9
    assert parse_launch(["sglang", "serve", "--tp", "2", "--dp", "2"]).gpus_needed() == 4
    assert parse_launch(["--model-path", "m"]).host == "127.0.0.1"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--port", "70000"], "launch option --port 70000: not a TCP port"),
        (["--mem-fraction-static", "1.5"], "launch option --mem-fraction-static 1.5: must be"),
        (["--tp"], "launch option --tp: missing its value"),
        # vllm is an engine now (engines.py): an unknown program is still refused in one line
        (
            ["text-generation-launcher", "serve", "m"],
            "launch command 'text-generation-launcher serve m'",
        ),
        ([], "no launch command"),
    ],
)
def test_parse_launch_bad_input(words: list[str], message: str) -> None:
    """Each mistake is one Sm120Error line naming the option (nothing simulated)."""
    with pytest.raises(Sm120Error) as err:
        parse_launch(words)
    assert str(err.value).startswith(message)


def test_launch_words_keep_the_shell_split() -> None:
    """Words after -- come from argv as the shell split them (a path with a space stays one)."""
    argv = ["invoke", "preflight", "-H", "h", "--", "sglang", "serve", "--model-path", "/m x"]
    assert launch_words(None, argv) == ["sglang", "serve", "--model-path", "/m x"]
    assert launch_words("sglang serve --model-path '/m x'", ["invoke"]) == argv[5:]
    with pytest.raises(Sm120Error, match="both given"):
        launch_words("sglang serve", argv)


@pytest.mark.parametrize(
    ("args", "failed"),
    [
        (["--attention-backend", "trtllm_mla"], "rule:trtllm-mla-sm120"),
        (
            ["--prefill-attention-backend", "trtllm_mha", "--kv-cache-dtype", "fp8_e4m3"],
            "rule:trtllm-mha-fp8-kv-sm120",
        ),
        (["--attention-backend", "cutedsl_mla"], "rule:cutedsl-mla-sm100-only"),
        (["--attention-backend", "aiter"], "rule:amd-or-other-platform"),
    ],
)
def test_known_bad_combinations_are_refused(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path, args: list[str], failed: str
) -> None:
    """Each rule fires on gpu2 (simulated RTX 5090, 12.0) with the real wheels' versions."""
    port = str(free_port("127.0.0.1"))
    proc, doc = preflight(
        fleet, tmp_path, "gpu2", venv, "--model-path", str(model), "--port", port, *args
    )
    assert proc.returncode == 2
    rule = checks_of(doc, "gpu2")[failed]
    assert rule["status"] == "fail" and rule["fix"] and rule["evidence"]["source"]


def test_flashmla_reads_flashmla_ops_and_names_the_missing_package(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """FlashMLA on gpu2 (simulated 12.0): flashmla_ops' archs from the real sglang-kernel
    wheel, and sgl-flash-mla (not in the venv) named as not installed."""
    proc, doc = preflight(
        fleet, tmp_path, "gpu2", venv, "--model-path", str(model),
        "--attention-backend", "flashmla", "--port", str(free_port("127.0.0.1")),
    )  # fmt: skip
    assert proc.returncode == 2
    attn = checks_of(doc, "gpu2")["attention_backend"]
    assert "flash_mla (sgl-flash-mla) not installed" in attn["reason"]
    # sglang-kernel 0.4.10 is in the shipped catalogue: its facts are judged, and said so.
    assert (
        "sgl_kernel/flashmla_ops.abi3.so (sglang-kernel 0.4.10, read from the catalogue "
        "locks/sglang-0.5.23/catalogue.toml) has sm_90a, sm_100f, sm_103a" in attn["reason"]
    )


def test_hub_id_is_not_checked_and_both_defaults_are_judged(
    fleet: Fleet, venv: Path, tmp_path: Path
) -> None:
    """A hub id on gpu2 (simulated 12.0): no config.json to read, so sglang's two defaults for
    12.x (flashinfer for MHA, triton for MLA) are both judged; the path is a skip, not a fail."""
    proc, doc = preflight(
        fleet, tmp_path, "gpu2", venv, "--model-path", "Qwen/Qwen3-8B",
        "--port", str(free_port("127.0.0.1")),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    checks = doc["hosts"]["gpu2"]["preflight"]["checks"]
    backends = [c for c in checks if c["check"] == "attention_backend"]
    assert [c["evidence"]["backend"] for c in backends] == ["flashinfer", "triton"]
    assert all("cannot be told without the model's config" in c["reason"] for c in backends)
    model_check = next(c for c in checks if c["check"] == "model_path")
    assert model_check["status"] == "skip" and "hub id" in model_check["reason"]


def test_base_gpu_id_picks_the_gpus() -> None:
    """--base-gpu-id / --gpu-id-step as sglang assigns ranks to GPUs (nothing simulated)."""
    launch = parse_launch(["--tp", "2", "--base-gpu-id", "1", "--gpu-id-step", "2"])
    assert launch.gpu_indices() == [1, 3]
    with pytest.raises(Sm120Error, match="--gpu-id-step: must be at least 1"):
        parse_launch(["--gpu-id-step", "0"])


@pytest.mark.parametrize(
    ("torch", "kernel", "driver", "status", "reason"),
    [
        ("2.14.1+cu130", "0.4.10", "580.95.05", "pass", "torch 2.14.1+cu130 (CUDA 13.0) on"),
        ("2.14.1+cu130", "0.4.10", "570.124.06", "fail", "needs driver >= 580; host has 570"),
        ("2.14.1+cu128", "0.4.10", "570.124.06", "pass", "(CUDA 12.8) on driver 570.124.06"),
        ("2.14.1+cpu", "0.4.10", "580.95.05", "fail", "torch 2.14.1+cpu is a CPU build"),
        ("2.14.1+cu130", "0.4.9", "580.95.05", "fail", "sglang-kernel 0.4.9, sglang 0.5.23 pins"),
    ],
)
def test_kernel_stack_against_sglangs_pins_and_the_driver(
    torch: str, kernel: str, driver: str, status: str, reason: str
) -> None:
    """The stack check on the pins of the real sglang 0.5.23 METADATA (read from the wheel's
    dist-info in the venv) and a host whose facts report `driver` on a 12.0 GPU; nothing else
    is simulated."""
    from importlib.metadata import PathDistribution

    from sm120kit.preflight.host import stack_check
    from tests.support.sglang_env import site_packages

    dist_info = next(site_packages(sglang_venv()).glob("sglang-0.5.23.dist-info"))
    requires = PathDistribution(dist_info).requires or []
    probe = {
        "dists": {
            "sglang": {"installed": True, "version": "0.5.23", "requires": requires},
            "torch": {"installed": True, "version": torch},
            "sglang-kernel": {"installed": True, "version": kernel},
            "flashinfer-python": {"installed": True, "version": "0.7.2"},
        }
    }
    verdict = stack_check(probe, {"gpu": {"driver_version": driver}}, (12, 0))
    assert verdict["status"] == status, verdict
    assert reason in verdict["reason"]


def test_arch_flag_judges_a_host_without_a_gpu(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """gpu3 has no nvidia-smi at all (simulated GPU-less box): --arch 12.0 judges the modules
    for 12.0, and the launch still fails for want of a GPU."""
    argv = [
        "preflight", "-H", "gpu3", "--python", str(venv), "--arch", "12.0", "--json", "--",
        *LAUNCHER, "--model-path", str(model), "--attention-backend", "fa3",
        "--port", str(free_port("127.0.0.1")),
    ]  # fmt: skip
    proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=300)
    assert proc.returncode == 2
    doc = json_of(proc)
    pre = doc["hosts"]["gpu3"]["preflight"]
    assert (pre["arch"], pre["arch_source"]) == ("12.0", "--arch")
    checks = checks_of(doc, "gpu3")
    assert "sm_80, sm_86, sm_90a" in checks["attention_backend"]["reason"]
    assert checks["gpus"]["reason"] == "tp 1 needs 1 GPU(s); nvidia-smi not found"


def test_serve_check_launch_preflights_starts_and_watches(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """serve-check with a launch on gpu1 (simulated 12.0 GPUs): preflight passes, the real
    sglang 0.5.23 launcher is started from the venv and exits (its dependencies, torch first,
    are not installed), and the verdict names the exit with the server's own log."""
    port = str(free_port("127.0.0.1"))
    argv = [
        "serve-check", "-H", "gpu1", "--python", str(venv), "--timeout", "5", "--json", "--",
        *LAUNCHER, "--model-path", str(model), "--attention-backend", "flashinfer",
        "--port", port,
    ]  # fmt: skip
    proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=300)
    assert proc.returncode == 2, proc.stderr
    host = json_of(proc)["hosts"]["gpu1"]
    assert host["preflight"]["ok"] is True
    launched = host["launched"]
    assert launched["argv"][1:4] == ["-m", "sglang.launch_server", "--model-path"]
    assert launched["argv"][0].startswith(str(venv))
    serve_doc = host["serve"]
    assert serve_doc["url"] == f"http://127.0.0.1:{port}"
    assert serve_doc["verdict"] == "not_listening"
    assert f"server process {launched['pid']} has exited" in serve_doc["reason"]
    assert "ModuleNotFoundError" in serve_doc["log_tail"]
    assert host["error"].endswith(f"(server log: {launched['log']})")


def test_serve_check_launch_refused_by_preflight_starts_nothing(
    fleet: Fleet, venv: Path, model: Path, tmp_path: Path
) -> None:
    """FA3 on gpu1 (simulated 12.0 GPUs): the preflight fails and no server is started."""
    argv = [
        "serve-check", "-H", "gpu1", "--python", str(venv), "--json", "--", *LAUNCHER,
        "--model-path", str(model), "--attention-backend", "fa3",
        "--port", str(free_port("127.0.0.1")),
    ]  # fmt: skip
    proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=300)
    assert proc.returncode == 2
    host = json_of(proc)["hosts"]["gpu1"]
    assert "launched" not in host and "serve" not in host
    assert host["error"].startswith("attention_backend: ")
    assert [s["name"] for s in host["steps"]][-1] == "preflight"

"""Preflight verdicts about the host and the serving env, whatever kernels the launch loads:
GPUs present and taken, memory held and by whom, --mem-fraction-static, the port, the model path,
the env's interpreter and its kernel stack against sglang's pins and the driver.

Each check is ``{"check", "status", "reason", "evidence", "fix"}`` (status pass / warn / fail /
skip); sm120kit/preflight/verdicts.py gathers them with the backend and rule verdicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..drivers import (
    MINOR_COMPAT_MIN_DRIVER,
    SM120_MIN_DRIVER,
    CudaVersion,
    min_driver,
    parse_driver_version,
)
from .launch import Launch

Check = dict[str, Any]
CC = tuple[int, int]

#: Memory (MiB) a GPU may show in use with no process listed before it is worth a warning
#: (the driver and display keep a few hundred MiB).
IDLE_USED_MIB = 1024


def check(
    name: str, status: str, reason: str, evidence: Any = None, fix: str | None = None
) -> Check:
    """One verdict."""
    return {"check": name, "status": status, "reason": reason, "evidence": evidence, "fix": fix}


def _gpus(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    gpu = facts.get("gpu") or {}
    return list(gpu.get("gpus") or []) if gpu.get("present") else []


def _used_gpus(launch: Launch, facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The GPUs the launch's ranks take (those that exist)."""
    gpus = _gpus(facts)
    return [gpus[i] for i in launch.gpu_indices() if i < len(gpus)]


def gpu_count_check(launch: Launch, facts: Mapping[str, Any]) -> Check:
    """TP x PP (x DP) against the GPUs the host has."""
    gpus = _gpus(facts)
    need = launch.gpus_needed()
    parts = f"tp {launch.tp}" + (f" x pp {launch.pp}" if launch.pp > 1 else "")
    if launch.dp > 1:
        parts += " (dp attention inside tp)" if launch.enable_dp_attention else f" x dp {launch.dp}"
    if launch.nnodes > 1:
        parts += f" over {launch.nnodes} nodes"
    evidence: dict[str, Any] = {"needed": need, "present": len(gpus)}
    if not gpus:
        reason = (facts.get("gpu") or {}).get("error") or "no GPU found"
        return check(
            "gpus",
            "fail",
            f"{parts} needs {need} GPU(s); {reason}",
            evidence,
            "run it on a host whose driver lists its GPUs (nvidia-smi), or --arch X.Y to "
            "judge the launch for a GPU elsewhere",
        )
    if need > len(gpus):
        return check(
            "gpus",
            "fail",
            f"{parts} needs {need} GPUs, the host has {len(gpus)}",
            evidence,
            f"--tp {len(gpus)} (or fewer), or a host with {need} GPUs",
        )
    indices = launch.gpu_indices()
    if indices[-1] >= len(gpus):
        evidence["indices"] = indices
        return check(
            "gpus",
            "fail",
            f"{parts} from --base-gpu-id {launch.base_gpu_id} (step {launch.gpu_id_step}) "
            f"takes GPUs {', '.join(map(str, indices))}; the host has 0-{len(gpus) - 1}",
            evidence,
            "a lower --base-gpu-id / --gpu-id-step",
        )
    return check("gpus", "pass", f"{parts} needs {need} of {len(gpus)} GPU(s)", evidence)


def gpu_memory_check(launch: Launch, facts: Mapping[str, Any]) -> Check:
    """GPU memory already held, and by which process (an old server not yet gone)."""
    gpus = _used_gpus(launch, facts)
    held, idle_used = [], []
    for g in gpus:
        for p in g.get("processes") or []:
            held.append(
                f"GPU{g['index']}: pid {p['pid']} {p.get('name')} ({p.get('memory_mib')} MiB)"
            )
        if not g.get("processes") and (g.get("memory_used_mib") or 0) > IDLE_USED_MIB:
            idle_used.append(f"GPU{g['index']} {g['memory_used_mib']} MiB")
    evidence = [
        {k: g.get(k) for k in ("index", "memory_mib", "memory_used_mib", "processes")} for g in gpus
    ]
    if not gpus:
        return check("gpu_memory", "skip", "no GPU data", evidence)
    if held:
        return check(
            "gpu_memory",
            "fail",
            "GPU memory already held: " + "; ".join(held),
            evidence,
            "stop those processes (an old server?) or give the launch other GPUs "
            "(CUDA_VISIBLE_DEVICES)",
        )
    if idle_used:
        return check(
            "gpu_memory",
            "warn",
            "memory in use with no process visible (another user's or a container's?): "
            + ", ".join(idle_used),
            evidence,
        )
    return check(
        "gpu_memory", "pass", f"no process holds memory on the {len(gpus)} GPU(s)", evidence
    )


def mem_fraction_check(launch: Launch, facts: Mapping[str, Any]) -> Check:
    """--mem-fraction-static of each GPU's total must fit in what is free on it now."""
    frac = launch.mem_fraction_static
    gpus = _used_gpus(launch, facts)
    if frac is None:
        return check(
            "mem_fraction", "skip", "--mem-fraction-static not given: sglang sizes it at start"
        )
    short = []
    for g in gpus:
        total, used = g.get("memory_mib"), g.get("memory_used_mib") or 0
        if not total:
            continue
        want = frac * total
        if want > total - used:
            short.append(
                f"GPU{g['index']}: {frac:g} x {total} MiB = {want:.0f} MiB > {total - used} MiB free"
            )
    if short:
        return check(
            "mem_fraction",
            "fail",
            "--mem-fraction-static leaves no room: " + "; ".join(short),
            {"fraction": frac},
            "free the GPU memory, or lower --mem-fraction-static",
        )
    if frac >= 0.95:
        return check(
            "mem_fraction",
            "warn",
            f"--mem-fraction-static {frac:g} leaves under 5% for activations and CUDA graphs",
            {"fraction": frac},
            "--mem-fraction-static 0.85-0.9",
        )
    return check("mem_fraction", "pass", f"{frac:g} of each GPU fits in its free memory")


def port_check(probe: Mapping[str, Any]) -> Check:
    """The server's --port must be free on its --host."""
    port = probe.get("port")
    if not port:
        return check("port", "skip", "port not probed")
    where = f"{port['host']}:{port['port']}"
    if port.get("in_use"):
        return check(
            "port",
            "fail",
            f"port {where} is already in use (an old server still running?)",
            port,
            "stop what listens there, or give the launch another --port",
        )
    if port.get("error"):
        return check("port", "warn", f"{where}: {port.get('detail')}", port)
    return check("port", "pass", f"{where} is free", port)


#: Why a local --model-path is no model sglang 0.5.23 loads (the probe's `model_form`): it
#: reads a directory's config.json (or a Mistral-native params.json), or a GGUF file.
NOT_A_MODEL = {
    "empty_dir": "an empty directory",
    "no_config": "a directory without config.json (or params.json)",
    "not_gguf": "a regular file that is not GGUF (sglang loads a file only as GGUF)",
    "special": "not a regular file or directory (a device or pipe)",
    "unreadable": "not readable by this user",
}


def model_check(launch: Launch, probe: Mapping[str, Any]) -> Check:
    """--model-path present on the host (a local path), or said unchecked (a hub id)."""
    if not launch.model_path:
        return check("model_path", "fail", "the launch has no --model-path", None, "--model-path M")
    model = probe.get("model") or {}
    if not model.get("local"):
        return check(
            "model_path",
            "skip",
            f"{launch.model_path} looks like a hub id: not checked offline (downloaded at start)",
            model,
        )
    if not model.get("exists"):
        return check(
            "model_path",
            "fail",
            f"{launch.model_path} does not exist on this host",
            model,
            "copy the model there, or fix --model-path",
        )
    if model.get("form") == "bad_config":
        config = f"{launch.model_path.rstrip('/')}/config.json"
        return check(
            "model_path",
            "fail",
            f"{config} {model.get('config_error') or 'is not a readable JSON object'}",
            model,
            f"replace {config} with the model's own config.json (a JSON object, UTF-8)",
        )
    why = NOT_A_MODEL.get(str(model.get("form")))
    if why:
        return check(
            "model_path",
            "fail",
            f"{launch.model_path} is not a model: {why}",
            model,
            "point --model-path at a model directory (config.json) or a .gguf file",
        )
    size = (model.get("bytes") or 0) / 1e9
    more = "+" if model.get("truncated") else ""
    return check(
        "model_path",
        "pass",
        f"{launch.model_path}: {size:.1f}{more} GB in {model.get('files')} file(s)",
        model,
    )


def env_check(probe: Mapping[str, Any], python_source: str) -> Check:
    """The serving env: its interpreter answers and sglang is installed in it."""
    dists = probe.get("dists") or {}
    if probe.get("error"):
        return check(
            "serving_env",
            "fail",
            f"{python_source} {probe.get('python')}: {probe['error']}",
            None,
            "--python PATH (the env sglang runs in), or provision the host",
        )
    versions = {k: v.get("version") for k, v in dists.items() if v.get("installed")}
    if "sglang" not in versions:
        return check(
            "serving_env",
            "fail",
            f"sglang is not installed in {probe.get('python')} ({python_source})",
            versions,
            "--python PATH of the env sglang runs in",
        )
    listed = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    return check("serving_env", "pass", f"{probe.get('python')}: {listed}", versions)


#: sglang's pins whose mismatch breaks the launch (extension ABI / API), and those that only
#: might (torch: the kernel package is built against one torch; smoke tells).
_PINNED_FAIL = ("sglang-kernel", "flashinfer-python")
_PINNED_WARN = ("torch",)


def _pins(requires: Iterable[str]) -> dict[str, SpecifierSet]:
    """Unconditional Requires-Dist pins by canonical name (markers and extras dropped)."""
    pins: dict[str, SpecifierSet] = {}
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None:
            continue
        pins[canonicalize_name(req.name)] = req.specifier
    return pins


def _satisfies(version: str, spec: SpecifierSet) -> bool:
    try:
        return Version(version) in spec
    except InvalidVersion:
        return False


def _torch_cuda(version: str) -> str | None:
    """CUDA X.Y of a torch build from its local version (2.9.1+cu130 -> 13.0), "cpu", or None."""
    local = version.partition("+")[2]
    if local == "cpu":
        return "cpu"
    if local.startswith("cu") and local[2:].isdigit() and len(local) >= 5:
        return CudaVersion.from_cu(local).xy
    return None


def _installed(probe: Mapping[str, Any], name: str) -> str | None:
    """The version of distribution `name` in the env's own full listing (the probe's
    ``installed``), or None when the env does not hold it or no listing was read."""
    listing = probe.get("installed") or {}
    return listing.get(canonicalize_name(name))


def stack_check(probe: Mapping[str, Any], facts: Mapping[str, Any], cc: CC | None) -> Check:
    """The env's kernel stack against sglang's own pins, and torch's CUDA against the driver."""
    dists = probe.get("dists") or {}
    sglang = dists.get("sglang") or {}
    if not sglang.get("installed"):
        return check("kernel_stack", "skip", "no sglang in the env (see serving_env)")
    pins = _pins(sglang.get("requires") or [])
    problems: list[tuple[str, str]] = []
    evidence: dict[str, Any] = {"pins": {k: str(v) for k, v in pins.items()}}
    for name in (*_PINNED_FAIL, *_PINNED_WARN):
        spec = pins.get(name)
        have = (dists.get(name) or {}).get("version")
        status = "fail" if name in _PINNED_FAIL else "warn"
        if spec is None:
            continue
        if have is None:
            have = _installed(probe, name)
        if have is None:
            problems.append(
                (status, f"{name} not installed (sglang {sglang['version']} pins {spec})")
            )
        elif not _satisfies(have, spec):
            problems.append((status, f"{name} {have}, sglang {sglang['version']} pins {spec}"))
    torch = (dists.get("torch") or {}).get("version")
    driver = (facts.get("gpu") or {}).get("driver_version")
    # The +cuXYZ tag when the wheel has one, else what torch/version.py says (the probe reads
    # it: torch 2.14.1 from PyPI is a CUDA 13.0 build with no local tag).
    cuda = (_torch_cuda(torch) or (dists.get("torch") or {}).get("cuda")) if torch else None
    evidence.update(torch=torch, torch_cuda=cuda, driver=driver)
    if cuda == "cpu":
        problems.append(("fail", f"torch {torch} is a CPU build: no CUDA at all"))
    elif cuda and driver:
        major = CudaVersion.parse(cuda).major
        floor = MINOR_COMPAT_MIN_DRIVER.get(major)
        if cc is not None and cc[0] == 12:
            floor = max(floor or SM120_MIN_DRIVER, SM120_MIN_DRIVER, key=parse_driver_version)
        try:
            strict = min_driver(cuda)
        except (ValueError, KeyError):
            strict = None
        have_driver = parse_driver_version(driver)
        if floor and have_driver < parse_driver_version(floor):
            problems.append(
                ("fail", f"torch {torch} (CUDA {cuda}) needs driver >= {floor}; host has {driver}")
            )
        elif strict and have_driver < parse_driver_version(strict):
            problems.append(
                (
                    "warn",
                    f"torch {torch} (CUDA {cuda}) runs on driver {driver} only through minor-"
                    f"version compatibility (no PTX JIT; NVIDIA's table: >= {strict})",
                )
            )
    if not problems:
        built = f"CUDA {cuda}" if cuda else "its CUDA version not read"
        what = f"torch {torch} ({built}) on driver {driver}; " if torch else ""
        return check("kernel_stack", "pass", f"{what}matches sglang's pins", evidence)
    worst = "fail" if any(s == "fail" for s, _ in problems) else "warn"
    return check(
        "kernel_stack",
        worst,
        "; ".join(text for _, text in problems),
        evidence,
        "install what sglang pins (pip install sglang==VERSION with its dependencies), or a "
        "torch build whose CUDA the driver runs",
    )

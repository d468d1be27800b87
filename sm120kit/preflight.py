"""Preflight verdicts: would this SGLang launch start on this host? Decided before weights load.

Pure functions from three inputs: the launch (sm120kit/launch.py), the host's facts (GPUs,
their memory and the processes holding it) and the preflight probe's JSON (the serving env's
distributions, the device code of the modules the chosen backends load, the port, the model
path). Each check is ``{"check", "status", "reason", "evidence", "fix"}`` with status
pass / warn / fail / skip; the host fails when any check fails. What is known about sglang
lives as data in sm120kit/preflight_rules.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .drivers import MINOR_COMPAT_MIN_DRIVER, SM120_MIN_DRIVER, min_driver, parse_driver_version
from .launch import Launch
from .preflight_rules import (
    A2A_BACKENDS,
    ATTENTION_BACKENDS,
    DEFAULT_ATTENTION,
    DISTRIBUTIONS,
    MOE_BACKENDS,
    RULES,
    TABLE_SGLANG,
    Backend,
    Rule,
)
from .remote.lib.cudaarch import arch_verdict, cc_text

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


# ------------------------------------------------------------------------- what to read


def canonical(name: str, table: Mapping[str, Backend]) -> str:
    """A backend name with its alias resolved (nsa -> dsa)."""
    entry = table.get(name)
    return entry.alias_of if entry is not None and entry.alias_of else name


def explicit_backends(launch: Launch) -> list[str]:
    """Every backend the launch names, attention and MoE (the probe reads their modules)."""
    names = [
        launch.attention_backend,
        launch.prefill_attention_backend,
        launch.decode_attention_backend,
    ]
    return [n for n in names if n]


def probe_request(launch: Launch, python: str | None) -> dict[str, Any]:
    """The preflight probe's arguments for this launch."""
    modules: list[dict[str, Any]] = []
    wanted: list[Backend] = []
    for name in explicit_backends(launch):
        entry = ATTENTION_BACKENDS.get(canonical(name, ATTENTION_BACKENDS))
        if entry is not None:
            wanted.append(entry)
    if launch.moe_runner_backend in MOE_BACKENDS:
        wanted.append(MOE_BACKENDS[launch.moe_runner_backend])
    if launch.moe_a2a_backend in A2A_BACKENDS:
        wanted.append(A2A_BACKENDS[launch.moe_a2a_backend])
    for entry in wanted:
        for m in entry.modules:
            item = {"dist": list(m.dist), "prefix": m.prefix}
            if item not in modules:
                modules.append(item)
    return {
        "python": python,
        "dists": list(DISTRIBUTIONS),
        "modules": modules,
        "port": launch.port,
        "host": launch.host,
        "model_path": launch.model_path,
    }


# ------------------------------------------------------------------------- backends


def attention_phases(launch: Launch, model: Mapping[str, Any] | None) -> dict[str, Any]:
    """The backend each phase resolves to, as sglang 0.5.23 resolves it, and how it was chosen.

    ``--attention-backend`` sets both phases, ``--prefill/--decode-attention-backend``
    override one; with none, sglang's own default for a 12.x GPU (DEFAULT_ATTENTION), computed
    from the model's config.json when the path is local, else both candidates are named.
    """
    base = launch.attention_backend
    how = "--attention-backend" if base else None
    default_note = None
    candidates: list[str] = []
    if base is None and not (
        launch.prefill_attention_backend
        and launch.prefill_attention_backend == launch.decode_attention_backend
    ):
        config = (model or {}).get("config") if model else None
        source = DEFAULT_ATTENTION["source"]
        if config:
            mla = config.get("kv_lora_rank") is not None
            base = DEFAULT_ATTENTION["mla" if mla else "mha"]
            kind = "an MLA model (config.json has kv_lora_rank)" if mla else "an MHA model"
            default_note = (
                f"sglang's default for {kind} on 12.x: {base} ({source}; a model with "
                "attention sinks gets triton, model-specific hooks may override)"
            )
        else:
            candidates = [DEFAULT_ATTENTION["mha"], DEFAULT_ATTENTION["mla"]]
            default_note = (
                f"no --attention-backend and no local config.json: sglang picks "
                f"{DEFAULT_ATTENTION['mha']} for MHA models, {DEFAULT_ATTENTION['mla']} for MLA "
                f"models on 12.x ({source}); which one cannot be told without the model's config"
            )
        how = "sglang default"
    elif base is None:
        base = launch.prefill_attention_backend
        how = "--prefill/--decode-attention-backend"
    prefill = launch.prefill_attention_backend or base
    decode = launch.decode_attention_backend or base
    names = [n for n in dict.fromkeys([prefill, decode, *candidates]) if n]
    return {
        "prefill": prefill,
        "decode": decode,
        "candidates": candidates,
        "how": how,
        "names": names,
        "note": default_note,
    }


def _module_entries(probe: Mapping[str, Any], entry: Backend) -> list[dict[str, Any]]:
    found = []
    for m in entry.modules:
        for got in probe.get("modules") or []:
            if list(got.get("dist") or []) == list(m.dist) and got.get("prefix") == m.prefix:
                found.append(dict(got, label=m.label))
    return found


def backend_verdict(
    role: str,
    name: str,
    table: Mapping[str, Backend],
    probe: Mapping[str, Any],
    cc: CC | None,
    table_version: str | None = None,
) -> Check:
    """Whether the modules backend `name` loads hold code for `cc` (fatbins read on the host).

    `table_version`: the sglang version `table` lists every accepted name of (a name outside
    it is refused by that sglang's own argument parser), None when another sglang is installed.
    """
    key = canonical(name, table)
    entry = table.get(key)
    label = f"{role} backend {name}" + (f" (alias of {key})" if key != name else "")
    if entry is None:
        if table_version:
            return check(
                f"{role}_backend",
                "fail",
                f"{label}: not a backend name sglang {table_version} accepts",
                None,
                "one of: " + ", ".join(sorted(table)),
            )
        return check(
            f"{role}_backend",
            "warn",
            f"{label}: not in preflight's table (not checked; this sglang may not accept it)",
        )
    dists = probe.get("dists") or {}
    evidence: dict[str, Any] = {"backend": name, "kind": entry.kind, "source": entry.source}
    where = cc_text(cc) if cc else "this GPU"
    if entry.kind == "platform":
        return check(f"{role}_backend", "fail", f"{label}: {entry.note}", evidence, "flashinfer")
    if entry.kind == "unknown":
        return check(
            f"{role}_backend",
            "warn",
            f"{label}: {entry.note or 'not modelled'} (modules not checked)",
            evidence,
        )
    missing = [d for d in entry.needs if not (dists.get(d) or {}).get("installed")]
    if missing:
        return check(
            f"{role}_backend",
            "fail",
            f"{label} imports {', '.join(missing)}, which is not installed in the serving env",
            evidence,
            f"pip install {missing[0]} into the env, or another backend",
        )
    if entry.kind in ("jit", "torch"):
        return check(
            f"{role}_backend",
            "pass",
            f"{label}: {entry.note}; nothing prebuilt to read (compiled for {where} at run time)",
            evidence,
        )
    if cc is None:
        return check(f"{role}_backend", "skip", f"{label}: no compute capability known", evidence)
    files: list[dict[str, Any]] = []
    worst = "pass"
    lines = []
    for got in _module_entries(probe, entry):
        if not got.get("installed_dist"):
            files.append({"module": got["label"], "status": "fail", "reason": "not installed"})
            lines.append(f"{got['label']} not installed")
            worst = "fail"
            continue
        for f in got.get("files") or []:
            status, reason = arch_verdict(f.get("sass") or [], f.get("ptx") or [], cc)
            files.append(dict(f, status=status, reason=reason, version=got.get("version")))
            if status in ("fail", "warn"):
                have = ", ".join((f.get("sass") or []) + (f.get("ptx") or []))
                lines.append(
                    f"{f['rel']} ({got['installed_dist']} {got.get('version')}) has {have}"
                )
                worst = "fail" if status == "fail" or worst == "fail" else "warn"
        if not got.get("files"):
            files.append({"module": got["label"], "status": "fail", "reason": "no such module"})
            lines.append(f"{got['label']}: no such extension module in {got['installed_dist']}")
            worst = "fail"
    evidence["files"] = files
    if worst == "pass":
        archs = sorted({t for f in files for t in (f.get("sass") or [])})
        return check(
            f"{role}_backend",
            "pass",
            f"{label}: every module it loads runs on {where} (SASS {', '.join(archs)})",
            evidence,
        )
    return check(
        f"{role}_backend",
        worst,
        f"{label}: no code for {where}: " + "; ".join(lines),
        evidence,
        "--attention-backend flashinfer (or triton)" if role == "attention" else None,
    )


def attention_checks(
    launch: Launch, probe: Mapping[str, Any], cc: CC | None, sglang: str | None
) -> tuple[list[Check], dict[str, Any]]:
    """One check per attention backend the launch resolves to (or may resolve to)."""
    phases = attention_phases(launch, probe.get("model"))
    out = []
    for name in phases["names"]:
        verdict = backend_verdict(
            "attention",
            name,
            ATTENTION_BACKENDS,
            probe,
            cc,
            TABLE_SGLANG if sglang == TABLE_SGLANG else None,
        )
        verdict["evidence"] = dict(verdict.get("evidence") or {}, chosen_by=phases["how"])
        if phases["note"]:
            verdict["reason"] += f" [{phases['note']}]"
        out.append(verdict)
    return out, phases


def moe_checks(launch: Launch, probe: Mapping[str, Any], cc: CC | None) -> list[Check]:
    """The MoE runner and all-to-all backends the launch names (auto: not computed)."""
    out = []
    runner = launch.moe_runner_backend
    if runner in (None, "auto"):
        out.append(
            check(
                "moe_backend",
                "skip",
                "MoE runner 'auto': sglang chooses it at load time from the checkpoint's "
                "quantization and the model (not computed without loading it)",
            )
        )
    else:
        out.append(backend_verdict("moe", runner, MOE_BACKENDS, probe, cc))
    if launch.moe_a2a_backend in A2A_BACKENDS:
        out.append(backend_verdict("moe_a2a", launch.moe_a2a_backend, A2A_BACKENDS, probe, cc))
    return out


# ------------------------------------------------------------------------- rules


def _setting(launch: Launch, phases: Mapping[str, Any], key: str) -> set[str]:
    if key == "attention":
        return {v for v in (phases["prefill"], phases["decode"]) if v}
    if key in ("prefill", "decode"):
        return {phases[key]} if phases[key] else set()
    if key == "moe":
        return {launch.moe_runner_backend} if launch.moe_runner_backend else set()
    value = getattr(launch, key, None)
    return {str(value)} if value is not None else set()


def rule_applies(rule: Rule, launch: Launch, phases: Mapping[str, Any], cc: CC | None) -> bool:
    """Whether the launch has every setting the rule names, on a GPU it is about."""
    if cc is None or cc[0] not in rule.majors:
        return False
    return all(_setting(launch, phases, key) & set(values) for key, values in rule.when.items())


def version_match(rule: Rule, versions: Mapping[str, str | None]) -> str | None:
    """The "dist version" the rule was verified for that is installed, or None."""
    for dist, spec in rule.versions:
        have = versions.get(dist)
        if not have:
            continue
        try:
            if Version(have) in SpecifierSet(spec):
                return f"{dist} {have}"
        except (InvalidVersion, InvalidSpecifier):
            continue
    return None


def rule_checks(
    launch: Launch,
    phases: Mapping[str, Any],
    cc: CC | None,
    versions: Mapping[str, str | None],
    rules: Iterable[Rule] = RULES,
) -> list[Check]:
    """One check per known-bad combination the launch hits (warn when outside its versions)."""
    out = []
    for rule in rules:
        if not rule_applies(rule, launch, phases, cc):
            continue
        matched = version_match(rule, versions)
        status, scope = rule.status, f"applies to {matched}"
        if matched is None:
            status = "warn"
            named = ", ".join(f"{d}{s}" for d, s in rule.versions)
            scope = f"verified for {named} only; the env has other versions"
        evidence = {"rule": rule.id, "source": rule.source, "scope": scope}
        where = cc_text(cc) if cc else "?"
        out.append(
            check(
                f"rule:{rule.id}",
                status,
                f"{rule.message} on {where} ({scope})",
                evidence,
                rule.fix,
            )
        )
    return out


# ------------------------------------------------------------------------- resources


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
        return check("gpus", "fail", f"{parts} needs {need} GPU(s); {reason}", evidence)
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
#: might (torch: sgl_kernel is built against one torch; smoke tells).
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
        digits = local[2:]
        return f"{int(digits[:-1])}.{digits[-1]}"
    return None


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
            problems.append(
                (status, f"{name} not installed (sglang {sglang['version']} pins {spec})")
            )
        elif not _satisfies(have, spec):
            problems.append((status, f"{name} {have}, sglang {sglang['version']} pins {spec}"))
    torch = (dists.get("torch") or {}).get("version")
    driver = (facts.get("gpu") or {}).get("driver_version")
    cuda = _torch_cuda(torch) if torch else None
    evidence.update(torch=torch, torch_cuda=cuda, driver=driver)
    if cuda == "cpu":
        problems.append(("fail", f"torch {torch} is a CPU build: no CUDA at all"))
    elif cuda and driver:
        major = int(cuda.split(".")[0])
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
        what = f"torch {torch} (CUDA {cuda}) on driver {driver}; " if torch else ""
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


def judge(
    launch: Launch,
    facts: Mapping[str, Any],
    probe: Mapping[str, Any],
    cc: CC | None,
    python_source: str = "serving env",
) -> dict[str, Any]:
    """Every preflight verdict for one host: {"ok", "checks", "failed", "attention"}."""
    env = env_check(probe, python_source)
    versions = {k: (v or {}).get("version") for k, v in (probe.get("dists") or {}).items()}
    sglang = versions.get("sglang")
    checks = [env, stack_check(probe, facts, cc)]
    attention, phases = attention_checks(launch, probe, cc, sglang)
    checks += attention
    checks += moe_checks(launch, probe, cc)
    checks += rule_checks(launch, phases, cc, versions)
    checks += [
        gpu_count_check(launch, facts),
        gpu_memory_check(launch, facts),
        mem_fraction_check(launch, facts),
        port_check(probe),
        model_check(launch, probe),
    ]
    failed = [c for c in checks if c["status"] == "fail"]
    return {
        "ok": not failed,
        "arch": cc_text(cc) if cc else None,
        "attention": {k: phases[k] for k in ("prefill", "decode", "candidates", "how", "note")},
        "checks": checks,
        "failed": [f"{c['check']}: {c['reason']}" for c in failed],
    }

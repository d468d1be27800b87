"""Preflight verdicts: would this SGLang launch start on this host? Decided before weights load.

Pure functions from three inputs: the launch (sm120kit/preflight/launch.py), the host's facts (GPUs,
their memory and the processes holding it) and the preflight probe's JSON (the serving env's
distributions, the device code of the modules the chosen backends load, the port, the model
path). This module judges the backends the launch resolves to and the known-bad rules, and
gathers the host and env checks of sm120kit/preflight/host.py. Each check is ``{"check", "status", "reason", "evidence", "fix"}`` with status
pass / warn / fail / skip; the host fails when any check fails. What is known about sglang
lives as data in sm120kit/preflight/rules.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..engines import SGLANG, Engine
from ..errors import one_line
from ..remote.lib.cudaarch import arch_verdict, cc_text
from ..stack.catalogue import Catalogue
from .fixes import alternatives, is_installed, missing_fix, shorten_resolution
from .from_catalogue import (
    cubin_coverage,
    gate_admissions,
    gate_refusals,
    kernel_sources,
    with_catalogue,
)
from .host import (
    CC,
    Check,
    check,
    env_check,
    gpu_count_check,
    gpu_memory_check,
    mem_fraction_check,
    model_check,
    port_check,
    stack_check,
)
from .launch import Launch, server_args
from .recheck import premise_disproved
from .rules import (
    A2A_BACKENDS,
    ATTENTION_BACKENDS,
    DEFAULT_ATTENTION,
    DISTRIBUTIONS,
    FIELD_TABLES,
    MOE_BACKENDS,
    RESOLVED_FIELDS,
    RULES,
    TABLE_SGLANG,
    Backend,
    Rule,
)
from .sglang_checks import after_check, overall, unresolved_checks

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


#: Seconds sglang's resolution may take in the env (imports torch, sglang, sgl_kernel: about
#: 30 s on a 2-core host under load).
RESOLVE_TIMEOUT = 300
#: Seconds the warm resolution server (sm120kit/remote/lib/warm.py) waits for the next preflight
#: before it exits: sglang imported once serves the launches checked within that time.
WARM_IDLE_S = 900
#: GPU memory a host without a GPU is presented with (MiB): a 32 GiB board. sglang's memory
#: hook sizes its defaults from it; no backend choice of sglang 0.5.23 reads it.
FAKE_MEMORY_MIB = 32768


def probe_request(
    launch: Launch,
    python: str | None,
    cc: CC | None = None,
    resolve: bool = False,
    memory_mib: int | None = None,
) -> dict[str, Any]:
    """The preflight probe's arguments for this launch. With `resolve`, the probe also asks
    sglang's own ServerArgs in the env which backends the launch gets (`cc` and `memory_mib`:
    the GPU it presents when the host has none), and reads the modules of every backend
    preflight's tables know, since which ones sglang picks is learnt in the same run."""
    modules: list[dict[str, Any]] = []
    wanted: list[Backend] = []
    if resolve:
        tables = [ATTENTION_BACKENDS, MOE_BACKENDS, A2A_BACKENDS]
        tables += [t for _label, t, _when in FIELD_TABLES.values()]
        for table in tables:
            wanted += [e for e in table.values() if e.modules]
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
    out: dict[str, Any] = {
        "python": python,
        "dists": list(DISTRIBUTIONS),
        "modules": modules,
        "port": launch.port,
        "host": launch.host,
        "model_path": launch.model_path,
    }
    if resolve:
        out["timeout"] = RESOLVE_TIMEOUT
        out["resolve"] = {
            "cases": [server_args(launch.words)],
            "fields": list(RESOLVED_FIELDS),
            "cc": list(cc) if cc else None,
            "memory_mib": memory_mib or FAKE_MEMORY_MIB,
            "warm": WARM_IDLE_S,
        }
    return out


# ------------------------------------------------------------------------- sglang's answer


def resolution(probe: Mapping[str, Any], engine: Engine = SGLANG) -> dict[str, Any]:
    """What the engine's own resolution said (every engine's, one shape): {"by", "backends",
    "error", "reason", "gpu", "driver", "after", "version", "model_source"}.

    `by` is what the verdict names as its source: "sglang X ServerArgs" (the engine, its
    version, `Engine.resolver_by`) when it ran, else "the tool's rules (sglang's resolution
    could not run: why)" ("tables" for a table-judged engine). `backends` is None when it did
    not run, else what it answered ({} for none).
    """
    tool = "rules" if engine.verdicts == "sglang" else "tables"
    doc = probe.get("resolved")
    if not doc:
        return {
            "by": f"the tool's {tool} ({engine.title}'s resolution was not asked)",
            "backends": None,
            "after": [],
        }
    if not doc.get("ran"):
        why = doc.get("reason") or "no reason given"
        return {
            "by": f"the tool's {tool} ({engine.title}'s resolution could not run: {why})",
            "backends": None,
            "reason": why,
            "after": [],
        }
    case = (doc.get("cases") or [{}])[0]
    return {
        "by": f"{engine.name} {doc.get('version')} {engine.resolver_by}",
        "backends": case.get("backends") or {},
        "error": case.get("error"),
        "gpu": doc.get("gpu"),
        "driver": doc.get("driver"),
        "after": case.get("after") or [],
        "version": doc.get("version"),
        "model_source": doc.get("model_source"),
    }


def resolved_launch(launch: Launch, backends: Mapping[str, Any]) -> Launch:
    """The launch with the backends sglang chose (what the tables and rules then judge)."""

    def pick(name: str) -> Any:
        value = backends.get(name)
        return value if value not in (None, "None") else getattr(launch, name)

    return dataclasses.replace(
        launch,
        attention_backend=pick("attention_backend"),
        prefill_attention_backend=pick("prefill_attention_backend"),
        decode_attention_backend=pick("decode_attention_backend"),
        moe_runner_backend=pick("moe_runner_backend"),
        moe_a2a_backend=pick("moe_a2a_backend"),
    )


def resolution_check(res: Mapping[str, Any]) -> Check:
    """The source of the backend verdicts, as a check (fail: sglang itself refuses the launch)."""
    if res.get("error"):
        return check(
            "sglang_resolution",
            "fail",
            f"resolved by: {res['by']}: {res['error']}",
            {"gpu": res.get("gpu")},
            "fix the flag sglang names",
        )
    if res.get("backends") is None:
        return check("sglang_resolution", "skip", f"resolved by: {res['by']}")
    if not any(v not in (None, "None") for v in res["backends"].values()):
        # No verdict passes over an empty list: an sglang without these fields answered none.
        return check(
            "sglang_resolution",
            "unknown",
            f"resolved by: {res['by']}: it answered none of the backend fields asked",
            {"backends": res["backends"], "gpu": res.get("gpu")},
        )
    chosen = ", ".join(
        f"{k}={v}" for k, v in sorted(res["backends"].items()) if v not in (None, "None")
    )
    gpu = res.get("gpu")
    if res.get("driver") and str(res["driver"]).startswith("no driver"):
        gpu = f"{gpu}; {res['driver']}"
    if res.get("model_source"):
        # A hub id: where the config sglang read came from (the HF cache's revision, or
        # --model-config), so a pass says what it rests on.
        gpu = f"{gpu}; {res['model_source']}"
    return check(
        "sglang_resolution",
        "pass",
        f"resolved by: {res['by']} ({gpu}): {chosen}",
        {"backends": res["backends"], "gpu": res.get("gpu"), "driver": res.get("driver")},
    )


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


def _module_entries(
    probe: Mapping[str, Any], entry: Backend, cats: Sequence[Catalogue] = ()
) -> list[dict[str, Any]]:
    """The probe's entries for the modules `entry` loads, each with its files from the
    catalogue when one read the installed version, else as read in the env (said which)."""
    found = []
    for m in entry.modules:
        for got in probe.get("modules") or []:
            if list(got.get("dist") or []) == list(m.dist) and got.get("prefix") == m.prefix:
                found.append(dict(with_catalogue(got, cats), label=m.label))
    return found


def _unseen_why(probe: Mapping[str, Any], entry: Backend, files: list[dict[str, Any]]) -> str:
    """Why no module of `entry` was seen to run here (for an "unknown" verdict)."""
    if probe.get("error"):
        return f"its modules could not be read ({one_line(str(probe['error']))})"
    if not entry.modules:
        return "preflight's table names no module for it"
    if not files:
        return "none of its modules was read in the serving env"
    return "its modules hold no device code ({})".format(
        ", ".join(str(f.get("rel") or f.get("module")) for f in files)
    )


def backend_verdict(
    role: str,
    name: str,
    table: Mapping[str, Backend],
    probe: Mapping[str, Any],
    cc: CC | None,
    table_version: str | None = None,
    cats: Sequence[Catalogue] = (),
) -> Check:
    """Whether the modules backend `name` loads hold code for `cc`: the catalogue's facts for
    the installed version when a catalogue (`cats`) read it, else the fatbins read on the host.

    `table_version`: the sglang version `table` lists every accepted name of (a name outside
    it is refused by that sglang's own argument parser), None when another sglang is installed.
    """
    key = canonical(name, table)
    entry = table.get(key)
    label = f"{role} backend {name}" + (f" (alias of {key})" if key != name else "")
    if entry is None:
        folded = [k for k in table if k.lower() == name.lower()]
        if folded:
            # argparse matches `choices` exactly (`value not in action.choices`), and sglang
            # 0.5.23 declares these flags with `choices=` (sglang/srt/arg_groups/fields/
            # exec_.py: ATTENTION_BACKEND_CHOICES and MOE_RUNNER_BACKEND_CHOICES from
            # arg_groups/choices.py, imported by srt/server_args.py): the server exits with
            # "invalid choice" before it loads anything, whatever its version.
            return check(
                f"{role}_backend",
                "fail",
                f"{label}: sglang's choices are case-sensitive; it refuses {name!r} "
                f"(invalid choice), it accepts {folded[0]!r}",
                None,
                folded[0],
            )
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
    if entry.sm12x is not None and cc is not None and cc[0] == 12:
        entry = entry.sm12x  # the package dispatches by arch: what runs on 12.x
    dists = probe.get("dists") or {}
    evidence: dict[str, Any] = {"backend": name, "kind": entry.kind, "source": entry.source}
    where = cc_text(cc) if cc else "this GPU"
    if entry.kind == "platform":
        return check(
            f"{role}_backend",
            "fail",
            f"{label}: {entry.note}",
            evidence,
            alternatives(table, probe, cc, name, role),
        )
    if entry.kind == "unknown":
        return check(
            f"{role}_backend",
            "warn",
            f"{label}: {entry.note or 'not modelled'} (modules not checked)",
            evidence,
        )
    installed = {d: (v or {}).get("version") for d, v in dists.items()}
    if entry.gates and cc is not None:
        # The package's own arch gate on this path, read from the installed release's source
        # (the catalogue): a refusal there ends the launch whatever the kernels are.
        refused = gate_refusals(entry.gates, installed, cc_text(cc), cats)
        if refused:
            evidence["gates"] = refused
            return check(
                f"{role}_backend",
                "fail",
                f"{label}: {entry.note}: refused on {where} by " + "; ".join(refused),
                evidence,
                entry.fix or alternatives(table, probe, cc, name, role),
            )
    missing = [d for d in entry.needs if not is_installed(probe, d)]
    if missing:
        return check(
            f"{role}_backend",
            "fail",
            f"{label} imports {', '.join(missing)}, which is not installed in the serving env",
            evidence,
            missing_fix(probe, missing, alternatives(table, probe, cc, name, role)),
        )
    if entry.kind == "undecided":
        return check(f"{role}_backend", "unknown", f"{label}: unknown: {entry.note}", evidence)
    if entry.by_gates and cc is not None:
        admitted = gate_admissions(entry.gates, installed, cc_text(cc), cats)
        if admitted is None:
            return check(
                f"{role}_backend",
                "unknown",
                f"{label}: {entry.note}: no catalogue read its arch gates for the installed "
                "version, so whether they admit " + where + " is unknown",
                evidence,
            )
        evidence["gates"] = admitted
        return check(
            f"{role}_backend",
            "pass",
            f"{label}: {entry.note}; its gates admit {where}: " + "; ".join(admitted),
            evidence,
        )
    if entry.kernels and cc is not None:
        # A JIT package: its per-arch kernel sources in the installed release (catalogue).
        installed = {d: (v or {}).get("version") for d, v in dists.items()}
        sources = kernel_sources(entry.kernels, installed, cc_text(cc), cats)
        if sources is not None:
            return check(
                f"{role}_backend",
                sources[0],
                f"{label}: {entry.note}: {sources[1]}",
                evidence,
                alternatives(table, probe, cc, name, role) if sources[0] == "fail" else None,
            )
    if entry.kind == "cubin":
        # Judged with the catalogue's cubin-set facts when it has them; else unknown, never
        # a pass (what is known about these kernels on this GPU is then in the rules).
        dist = entry.needs[0] if entry.needs else ""
        status, why = cubin_coverage(
            dist,
            (dists.get(dist) or {}).get("version"),
            entry.cubins,
            cc_text(cc) if cc else "?",
            cats,
        )
        evidence["cubins"] = list(entry.cubins)
        return check(
            f"{role}_backend",
            status,
            f"{label}: {entry.note}: {why}",
            evidence,
            (entry.fix or alternatives(table, probe, cc, name, role)) if status == "fail" else None,
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
    for got in _module_entries(probe, entry, cats):
        if not got.get("installed_dist"):
            files.append({"module": got["label"], "status": "fail", "reason": "not installed"})
            lines.append(f"{got['label']} not installed")
            worst = "fail"
            continue
        for f in got.get("files") or []:
            status, reason = arch_verdict(f.get("sass") or [], f.get("ptx") or [], cc)
            files.append(dict(f, status=status, reason=reason, version=got.get("version")))
            if status in ("fail", "warn"):
                have = ", ".join((f.get("sass") or []) + (f.get("ptx") or [])) or "no device code"
                lines.append(
                    f"{f['rel']} ({got['installed_dist']} {got.get('version')}, read from "
                    f"{got.get('read_from')}) has {have}"
                )
                worst = "fail" if status == "fail" or worst == "fail" else "warn"
        if not got.get("files"):
            files.append({"module": got["label"], "status": "fail", "reason": "no such module"})
            lines.append(f"{got['label']}: no such extension module in {got['installed_dist']}")
            worst = "fail"
    evidence["files"] = files
    if worst == "pass":
        # No verdict passes over an empty list: a pass needs a module whose SASS was seen to
        # run here. Nothing read (no serving env, modules not listed) or modules without
        # device code is "unknown", with why.
        seen = [f for f in files if f.get("status") == "pass"]
        if not seen:
            return check(
                f"{role}_backend",
                "unknown",
                f"{label}: unknown: {_unseen_why(probe, entry, files)}",
                evidence,
            )
        archs = sorted({t for f in seen for t in (f.get("sass") or [])})
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
        alternatives(table, probe, cc, name, role),
    )


def attention_checks(
    launch: Launch,
    probe: Mapping[str, Any],
    cc: CC | None,
    sglang: str | None,
    cats: Sequence[Catalogue] = (),
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
            cats,
        )
        verdict["evidence"] = dict(verdict.get("evidence") or {}, chosen_by=phases["how"])
        if phases["note"]:
            verdict["reason"] += f" [{phases['note']}]"
        out.append(verdict)
    return out, phases


def moe_checks(
    launch: Launch, probe: Mapping[str, Any], cc: CC | None, cats: Sequence[Catalogue] = ()
) -> list[Check]:
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
        out.append(backend_verdict("moe", runner, MOE_BACKENDS, probe, cc, None, cats))
    a2a = launch.moe_a2a_backend
    if a2a and a2a.lower() in {k.lower() for k in A2A_BACKENDS}:
        out.append(backend_verdict("moe_a2a", a2a, A2A_BACKENDS, probe, cc, None, cats))
    return out


def _named(launch: Launch, field: str) -> bool:
    flag = "--" + field.replace("_", "-")
    return any(w == flag or w.startswith(flag + "=") for w in launch.words)


def field_checks(
    launch: Launch,
    backends: Mapping[str, Any],
    probe: Mapping[str, Any],
    cc: CC | None,
    cats: Sequence[Catalogue] = (),
) -> list[Check]:
    """One check per other backend-selecting field sglang resolved (FIELD_TABLES: the DSA
    phases, top-k and indexer, the GEMM runners, linear attention, the speculative draft's),
    judged as the attention backends are. "auto" left by sglang is chosen at load time (not
    judged here: sglang_resolution lists it); DSA fields only when attention resolves to dsa;
    some fields only when the launch names them."""
    attention = {backends.get(k) for k in ("attention_backend", "prefill_attention_backend")}
    attention |= {backends.get("decode_attention_backend")}
    dsa = any(v and canonical(str(v), ATTENTION_BACKENDS) == "dsa" for v in attention)
    out = []
    for field, (label, table, when) in FIELD_TABLES.items():
        value = backends.get(field)
        if value in (None, "None", "none", ""):
            continue
        if (when == "dsa" and not dsa) or (when == "set" and not _named(launch, field)):
            continue
        if value == "auto" and "auto" not in table:
            continue
        role = field[: -len("_backend")]
        verdict = backend_verdict(role, str(value), table, probe, cc, None, cats)
        verdict["reason"] = f"{label}: {verdict['reason']}"
        verdict["evidence"] = dict(verdict.get("evidence") or {}, field=field)
        out.append(verdict)
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


def rule_checks(
    launch: Launch,
    phases: Mapping[str, Any],
    cc: CC | None,
    versions: Mapping[str, str | None],
    rules: Iterable[Rule] = RULES,
    cats: Sequence[Catalogue] = (),
) -> list[Check]:
    """One check per known-bad combination the launch hits: a warning, not a failure, when
    the env is outside the range the rule was verified for (`Rule.scope`) or the installed
    release's files disprove its premise (`recheck.premise_disproved`), saying why."""
    out = []
    where = cc_text(cc) if cc else "?"
    for rule in rules:
        if not rule_applies(rule, launch, phases, cc):
            continue
        inside, scope = rule.scope(versions)
        status = rule.status
        if not inside:
            status, scope = "warn", f"{scope}: not applied outside that range"
        disproved = premise_disproved(rule, versions, cats, where) if inside else []
        if disproved:
            status, scope = "warn", f"{scope}; not applied: " + "; ".join(disproved)
        evidence = {"rule": rule.id, "source": rule.source, "scope": scope}
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


def judge(
    launch: Launch,
    facts: Mapping[str, Any],
    probe: Mapping[str, Any],
    cc: CC | None,
    python_source: str = "serving env",
    cats: Sequence[Catalogue] = (),
    strict: bool = False,
) -> dict[str, Any]:
    """Every preflight verdict for one host: {"ok", "verdict", "checks", "failed", "unknown",
    "strict_failed", "attention"}.

    `cats`: the catalogues of release facts whose module facts judge a backend's modules for
    the versions they read (the env's own files otherwise). `strict`: an unknown check fails
    the host too (sglang_checks.overall)."""
    env = env_check(probe, python_source)
    versions = {k: (v or {}).get("version") for k, v in (probe.get("dists") or {}).items()}
    sglang = versions.get("sglang")
    res = resolution(probe)
    checks = [env, stack_check(probe, facts, cc), resolution_check(res)]
    checks += [c for c in [after_check(res)] if c is not None]
    if res.get("backends"):
        launch = resolved_launch(launch, res["backends"])
    attention, phases = attention_checks(launch, probe, cc, sglang, cats)
    if res.get("backends"):
        phases["how"] = f"resolved by: {res['by']}"
        for c in attention:
            c["evidence"] = dict(c.get("evidence") or {}, chosen_by=phases["how"])
    for c in attention:
        if res.get("backends") and (c.get("evidence") or {}).get("backend") in ("dsa", "nsa"):
            # sglang resolved the DSA phases: those are judged (field_checks), not "dsa".
            c["status"] = "skip"
            c["reason"] = "attention backend dsa: judged per phase (dsa_prefill, dsa_decode)"
    checks += attention
    checks += moe_checks(launch, probe, cc, cats)
    if res.get("backends"):
        checks += field_checks(launch, res["backends"], probe, cc, cats)
    checks += rule_checks(launch, phases, cc, versions, RULES, cats)
    checks += [
        gpu_count_check(launch, facts),
        gpu_memory_check(launch, facts),
        mem_fraction_check(launch, facts),
        port_check(probe),
        model_check(launch, probe),
    ]
    if res.get("backends"):
        shorten_resolution(checks, res)
    checks = unresolved_checks(res, checks)
    summary = overall(checks, strict)
    return {
        "ok": not summary["failed"],
        "verdict": summary["verdict"],
        "unknown": summary["unknown"],
        "arch": cc_text(cc) if cc else None,
        "attention": {k: phases[k] for k in ("prefill", "decode", "candidates", "how", "note")},
        "resolved_by": res["by"],
        "resolved": res.get("backends"),
        "checks": checks,
        "failed": summary["failed"],
        "strict_failed": summary["strict_failed"],
    }

"""The serving stack on a host: the recipe's lock, installed into its own env, nothing else.

The env is ``<work_root>/envs/stack-<lock file stem>`` (apart from the build env: it holds
exactly the lock's distributions plus what ``python -m venv`` puts in). Each locked file is
obtained for the host by `stack_files.obtain_release` (the controller's own copy, else the
wheel stores, else one host of the run downloads it from the index and the stores take it) into
``<work_root>/releases/<sha256>/<filename>``,
where a rerun finds it. `remote/install_lock.py` then checks every file's sha256 against the
lock and verifies every compiled release for the host's driver and arch before it installs
anything, and installs with ``pip install --no-deps --require-hashes --no-index``. What it
installed is recorded by sha256 beside the env, so a rerun installs and downloads nothing.

Check mode: the choices (`sm120kit.stack.choose`), one probe, and the commands it would run.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import release_check
from ..errors import HostFailed
from ..lock import Lock, LockEntry
from ..recipes import resolve_for_host
from ..remote import script_bundle
from ..remote.lib.cudaarch import parse_cc
from ..runner import HostContext
from ..stack import Choice, choose, glibc_problem, not_for_arch, shown, target_of
from ..state import ProvisionState
from .pyenv import choose_python
from .stack_files import obtain_release

RECORD = ".sm120kit-lock.json"
#: The .pth file giving the env's JIT packages the toolkit step's CUDA_HOME (install_lock).
PTH = "sm120kit_cuda_home.pth"
INSTALL_TIMEOUT = 4 * 3600.0
#: Locked files obtained at once per host (each its own lookup, download and store put).
FETCH_WORKERS = 4


def env_path(state: ProvisionState, lock: Lock) -> str:
    """The serving env of `lock` on this host."""
    return state.paths.join("envs", f"stack-{lock.label}")


def release_path(state: ProvisionState, entry: LockEntry) -> str:
    """Where the host keeps a locked file: by sha256, so one file is fetched once."""
    return state.paths.join("releases", entry.sha256, entry.filename)


def _needs(entry: dict[str, Any], probe: dict[str, Any]) -> bool:
    """Whether the env lacks this file: the record names another sha256, or the env holds
    another version (or none) of the distribution."""
    key = str(canonicalize_name(entry["name"]))
    mine = ((probe.get("record") or {}).get("packages") or {}).get(key) or {}
    have = (probe.get("installed") or {}).get(key)
    return not (mine.get("sha256") == entry["sha256"] and have == entry["version"])


def build_state(state: ProvisionState, lock: Lock, name: str) -> ProvisionState:
    """The state a stack build runs in: the recipe resolved again for this host with the
    lock's torch (a build must run against the torch it will be loaded with), building
    `name` only. The recipe's own torch is kept when it is the lock's version."""
    resolved = state.resolved
    extra: dict[str, Any] = {}
    if lock.torch and Version(str(resolved.values["torch.version"])).public != lock.torch:
        extra = {
            "recipe.torch.version": lock.torch,
            "recipe.torch.index": "pypi",
            "recipe.torch.cuda": lock.torch_cuda,
        }
    host = replace(
        state.host,
        vars={**state.host.vars, **extra},
        var_sources={
            **state.host.var_sources,
            **{k: f"{lock.path.name} (lock torch)" for k in extra},
        },
    )
    again = resolve_for_host(
        {resolved.recipe.name: resolved.recipe},
        host,
        state.facts,
        driver=resolved.values.get("target.driver"),
        arch=resolved.values.get("target.arch"),
        forced=resolved.recipe.name,  # the recipe this host already got
    )
    built = ProvisionState(host, state.facts, again, flags=state.flags, wanted=[name])
    built.toolkit = state.toolkit
    return built


def ensure_stack_builds(
    ctx: HostContext, state: ProvisionState, lock: Lock, builds: list[Choice]
) -> dict[str, dict[str, Any]]:
    """Build each `build` choice from the recipe's pinned entry (the usual build operation,
    through the wheel cache) in an env with the lock's torch; its wheel is then installed
    into the serving env with the releases."""
    from .build import ensure_package
    from .pyenv import ensure_env

    out: dict[str, dict[str, Any]] = {}
    for c in builds:
        name = str(c.build["package"])
        sub = build_state(state, lock, name)
        ensure_env(ctx, sub, [name])
        out[c.entry.name] = ensure_package(ctx, sub, name)
        state.packages[name] = out[c.entry.name]
    return out


def _target(state: ProvisionState, lock: Lock) -> dict[str, Any]:
    """What the releases are verified for, with the digest a kept verdict is filed under: of
    the target and of the program that judges (a change to either judges again)."""
    driver, arch = target_of(state.resolved)
    cc = parse_cc(arch)
    target = {
        "cc": list(cc) if cc else None,
        "driver": driver,
        "driver_cuda": release_check.driver_cuda(driver),
        "python": lock.python,
        "not_for_arch": not_for_arch(state.resolved),
        "loaders": state.resolved.recipe.stack.loaders if state.resolved.recipe.stack else {},
    }
    judge = json.dumps(target, sort_keys=True) + script_bundle("install_lock")
    return {**target, "digest": hashlib.sha256(judge.encode()).hexdigest()}


def stack_document(
    lock: Lock, choices: list[Choice], env: str | None, loaders: dict[str, Any]
) -> dict[str, Any]:
    """The host's ``stack`` result: the lock, the env, every distribution's source."""
    return {
        "top": lock.top,
        "lock": str(lock.path),
        "torch": lock.torch,
        "env": env,
        "packages": {c.entry.name: c.to_dict() for c in choices},
        "shown": [c.entry.name for c in choices if shown(c, lock, loaders)],
    }


def ensure_stack(ctx: HostContext, state: ProvisionState, *, install: bool) -> dict[str, Any]:
    """Choose every locked distribution's source (plan shows it); with `install`, make the
    serving env hold the lock's releases (builds: `ensure_stack_builds`)."""
    lock, choices = choose(state.resolved, read_copies=ctx.check_mode or not install)
    problem = glibc_problem(lock, state.facts.get("glibc"))
    if problem:
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {problem}")
    env = env_path(state, lock) if install else None
    stack = state.resolved.recipe.stack
    doc = stack_document(lock, choices, env, stack.loaders if stack else {})
    ctx.set(stack=doc)
    if not install:
        return doc
    assert env is not None
    releases = [c for c in choices if c.source == "release"]
    builds = [c for c in choices if c.source == "build"]
    python = choose_python(state.facts, lock.python, state.host.name)
    record = posixpath.join(env, RECORD)
    entries: list[dict[str, Any]] = [
        {
            "name": c.entry.name,
            "version": c.entry.version,
            "filename": c.entry.filename,
            "url": c.entry.url,
            "sha256": c.entry.sha256,
            "compiled": c.entry.compiled,
            "dest": release_path(state, c.entry),
        }
        for c in releases
    ]
    built = ensure_stack_builds(ctx, state, lock, builds)
    for c in builds:
        rec = built[c.entry.name]
        doc["packages"][c.entry.name].update(
            wheel_from=rec.get("wheel_from"), wheel=rec.get("wheel"), built_sha256=rec.get("sha256")
        )
    entries += [
        {
            "name": c.entry.name,
            "version": c.entry.version,
            "filename": posixpath.basename(str(built[c.entry.name].get("wheel") or "")),
            "url": f"file://{built[c.entry.name].get('wheel')}",
            "sha256": built[c.entry.name].get("sha256") or "",
            "compiled": False,  # our own build: smoke judges it, as every build
            "dest": built[c.entry.name].get("wheel") or "",
        }
        for c in builds
        if built[c.entry.name].get("wheel")
    ]
    with ctx.step("stack") as step:
        probe = ctx.script(
            "install_lock", {"action": "probe", "env": env, "record": record, "entries": entries}
        )
        todo = [e for e in entries if _needs(e, probe)]
        for c in releases:
            doc["packages"][c.entry.name]["wheel_from"] = "release"
            doc["packages"][c.entry.name]["index"] = posixpath.dirname(c.entry.url)
        home = state.toolkit.cuda_home if state.toolkit is not None else None
        pth_ok = probe.get("cuda_home") == home
        if not todo and pth_ok:
            step.message = f"{lock.top}: {len(entries)} distributions installed in {env} as locked"
            if home:
                step.message += f", CUDA_HOME {home}"
            return doc
        present = set(probe.get("present") or [])
        fetch = [e for e in todo if e["dest"] not in present]
        size = sum(
            c.entry.size or 0
            for c in releases
            if release_path(state, c.entry) in {e["dest"] for e in fetch}
        )
        what = (
            f"install {len(todo)} of {len(entries)} locked distributions of {lock.top} into {env} "
            f"({len(fetch)} files to fetch, {size / 1e9:.2f} GB known)"
            if todo
            else f"{lock.top} in {env}: installed as locked"
        )
        driver, arch = target_of(state.resolved)
        commands = [f"fetch {e['url']} -> {e['dest']} (sha256 {e['sha256']})" for e in fetch]
        if todo:
            commands += [
                f"verify compiled releases for driver {driver}, arch {arch}",
                f"{python['path']} -m venv {env}  # if absent",
                f"{env}/bin/python -m pip install --no-deps --require-hashes --no-index "
                f"--no-compile -r <a group of the {len(todo)} locked files with --hash>  "
                "# one pip per CPU at once",
                f"{env}/bin/python -m compileall -q -i <each group's .py files>  # as its pip ends",
            ]
        if not pth_ok:
            what += f"; CUDA_HOME for its JIT packages: {home or 'none (no toolkit)'}"
            commands.append(
                f"write <site-packages>/{PTH}: CUDA_HOME={home} unless set"
                if home
                else f"remove <site-packages>/{PTH}"
            )
        if not ctx.may_act(step, what, commands):
            return doc
        step.commands = commands
        if todo:
            _install(ctx, state, lock, doc, releases, todo, fetch, python["path"], record)
            step.message = f"{what}: {doc.pop('install_message')}"
        else:
            step.message = what
        if not pth_ok or todo:
            done = ctx.script(
                "install_lock", {"action": "cuda_home", "env": env, "cuda_home": home}
            )
            if not done.get("ok"):
                raise HostFailed(f"{state.host.name}: stack {lock.top}: {done.get('error')}")
    return doc


def _install(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    doc: dict[str, Any],
    releases: list[Choice],
    todo: list[dict[str, Any]],
    fetch: list[dict[str, Any]],
    python: str,
    record: str,
) -> None:
    """Obtain the files to fetch (`stack_files.obtain_release`), then check, verify and
    install `todo` on the host (`install_lock` ``apply``); fills `doc`."""
    env = str(doc["env"])
    by_dest = {release_path(state, c.entry): c for c in releases}
    wanted = [e for e in fetch if e["dest"] in by_dest]
    target = _target(state, lock)
    # A few files at once: most of a lock's 200 files are small, where one file's lookup,
    # download and store put cost more in round trips than in bytes.
    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        got = list(
            pool.map(lambda e: obtain_release(ctx, by_dest[e["dest"]].entry, e["dest"]), wanted)
        )
    origins = {e["dest"]: where for e, (where, _n) in zip(wanted, got, strict=True)}
    fetched = sum(n for _where, n in got)
    result = ctx.script(
        "install_lock",
        {
            "action": "apply",
            "env": env,
            "record": record,
            "python": python,
            "lock": str(lock.path),
            "entries": todo,
            "verify": target,
        },
        timeout=INSTALL_TIMEOUT,
    )
    for name, verdict in (result.get("verdicts") or {}).items():
        row = doc["packages"][name]
        row["verdict"] = "ok" if verdict["ok"] else f"refused: {verdict['refusal']}"
        row["notes"] = verdict["notes"]
        row["checked"] = "sha256, cudart and SASS/PTX read on the host before install"
    if not result.get("ok"):
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {result.get('error')}")
    got = fetched + sum(n for _, n in result.get("downloaded") or [])
    doc["downloaded_bytes"] = got
    doc["files_from"] = dict(Counter(origins.values()))
    sources = ", ".join(f"{n} from {k}" for k, n in sorted(doc["files_from"].items()))
    doc["install_message"] = (
        f"installed {result.get('installed')} in {result.get('seconds', 0):.1f}s, "
        f"{got / 1e9:.2f} GB downloaded by this host (files: {sources or 'none fetched'})"
    )

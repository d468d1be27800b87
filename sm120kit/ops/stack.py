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
from .build_progress import poll_progress
from .pyenv import choose_python
from .stack_files import UV, UV_INDEXES, index_problems, obtain_release, tag_problems

RECORD = ".sm120kit-lock.json"
#: Where a new env is made before it is moved into place (`uv_sync`).
NEW = ".sm120kit-new"
#: The .pth file giving the env's JIT packages the toolkit step's CUDA_HOME (install_lock).
PTH = "sm120kit_cuda_home.pth"
INSTALL_TIMEOUT = 4 * 3600.0
#: Locked files obtained at once per host (each its own lookup, download and store put).
FETCH_WORKERS = 8


def env_path(state: ProvisionState, lock: Lock) -> str:
    """The serving env of `lock` on this host."""
    return state.paths.join("envs", f"stack-{lock.label}")


def release_path(state: ProvisionState, entry: LockEntry) -> str:
    """Where the host keeps a locked file: by sha256, so one file is fetched once."""
    return state.paths.join("releases", entry.sha256, entry.filename)


def _drift(entries: list[dict[str, Any]], probe: dict[str, Any]) -> list[str]:
    """How the env differs from the lock, one phrase per kind (empty: as locked): no env, a
    broken one (cut off while made), distributions missing, at another version or file, or
    not in the lock at all (installed behind the tool's back)."""
    if not probe.get("exists"):
        return ["no env yet"]
    if not probe.get("works"):
        return ["the env does not work (half-made?): made again"]
    mine = (probe.get("record") or {}).get("packages") or {}
    have = dict(probe.get("installed") or {})
    want = {str(canonicalize_name(e["name"])): e for e in entries}
    missing = sorted(k for k in want if k not in have)
    other = sorted(
        k
        for k, e in want.items()
        if k in have
        and (have[k] != e["version"] or (mine.get(k) or {}).get("sha256") != e["sha256"])
    )
    extra = sorted(f"{k}=={v}" for k, v in have.items() if k not in want)
    out = []
    for label, names in (("missing", missing), ("another version or file", other),
                         ("not in the lock", extra)):  # fmt: skip
        if names:
            shown_ = ", ".join(names[:5]) + (
                f" and {len(names) - 5} more" if len(names) > 5 else ""
            )
            out.append(f"{label}: {shown_}")
    return out


def _uv_cache(state: ProvisionState) -> str:
    """uv's cache on the host (beside the env, so uv links from it into the env)."""
    return state.paths.join("cache", "uv")


def build_state(state: ProvisionState, lock: Lock, name: str) -> ProvisionState:
    """The state a stack build runs in: the recipe resolved again for this host with the
    lock's torch (a build must run against the torch it will be loaded with), building
    `name` only. The recipe's own torch is kept when it is the lock's version."""
    resolved = state.resolved
    extra: dict[str, Any] = {}
    if lock.torch and Version(resolved.torch.version).public != lock.torch:
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
        driver=resolved.target.driver,
        arch=resolved.target.arch.cc,
        forced=resolved.recipe.name,  # the recipe this host already got
    )
    built = ProvisionState(host, state.facts, again, flags=state.flags, wanted=[name])
    built.toolkit = state.toolkit
    built.python, built.stack_lock = state.python, state.stack_lock
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
    lock, choices = choose(
        state.resolved, read_copies=ctx.check_mode or not install, lock=state.stack_lock
    )
    # The python step's interpreter (host_python.py; in plan, maybe one it would install)
    # when it is the lock's Python.
    chosen = state.python
    python = (
        {"path": chosen.path, "version": chosen.version}
        if chosen is not None and chosen.version == lock.python
        else choose_python(state.facts, lock.python, state.host.name)
    )
    # Every file, before anything changes: a wheel the host cannot install, or a URL outside
    # the lock's indexes, is refused by plan and provision alike.
    wheels = [c.entry for c in choices if c.source == "release"] + [UV]
    version = ".".join(str(python.get("version") or lock.python).split(".")[:2])
    problems = tag_problems(wheels, state.facts.get("glibc"), state.facts.get("arch"), version)
    problems += index_problems([c.entry for c in choices if c.source == "release"], lock.indexes)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {problems[0]}{more}")
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
        uv_row = {"name": UV.name, "dest": release_path(state, UV)}
        probe = ctx.script(
            "install_lock",
            {"action": "probe", "env": env, "record": record, "entries": [*entries, uv_row]},
        )
        drift = _drift(entries, probe)
        for c in releases:
            doc["packages"][c.entry.name]["wheel_from"] = "release"
            doc["packages"][c.entry.name]["index"] = posixpath.dirname(c.entry.url)
        home = state.toolkit.cuda_home if state.toolkit is not None else None
        pth_ok = probe.get("cuda_home") == home
        if not drift and pth_ok:
            step.message = f"{lock.top}: {len(entries)} distributions installed in {env} as locked"
            if home:
                step.message += f", CUDA_HOME {home}"
            return doc
        present = set(probe.get("present") or [])
        uv_dest = release_path(state, UV)
        fetch = [e for e in entries if e["dest"] not in present]
        names = {e["name"] for e in fetch}
        size = sum(c.entry.size or 0 for c in releases if c.entry.name in names)
        what = (
            f"install exactly the {len(entries)} locked distributions of {lock.top} into {env} "
            f"({'; '.join(drift)}; {len(fetch)} files to fetch, {size / 1e9:.2f} GB known)"
            if drift
            else f"{lock.top} in {env}: installed as locked"
        )
        driver, arch = target_of(state.resolved)
        commands = [f"fetch {e['url']} -> {e['dest']} (sha256 {e['sha256']})" for e in fetch]
        if drift and uv_dest not in present:
            commands.append(f"fetch {UV.url} -> {uv_dest} (sha256 {UV.sha256})")
        if drift:
            uv_bin = state.paths.join("tools", f"uv-{UV.version}", "uv")
            made = f"{env}{NEW}"
            commands += [
                f"unpack uv {UV.version} from {uv_dest} to {uv_bin}  # if absent",
                f"verify compiled releases for driver {driver}, arch {arch}",
                f"{uv_bin} venv --relocatable --python {python['path']} {made} "
                f"&& (sync below into it) && mv {made} {env}  # if absent or broken",
                f"{uv_bin} pip sync --offline --no-index --require-hashes --compile-bytecode "
                f"--python {env}/bin/python <the {len(entries)} verified files as "
                f"'name @ file://... --hash=sha256:...'>  # UV_CACHE_DIR={_uv_cache(state)}",
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
        if drift:
            if uv_dest not in present:
                fetch = [*fetch, uv_row]
            _install(ctx, state, lock, doc, releases, entries, fetch, python["path"], record)
            step.message = f"{what}: {doc.pop('install_message')}"
        else:
            step.message = what
        if not pth_ok or drift:
            done = ctx.script(
                "install_lock", {"action": "cuda_home", "env": env, "cuda_home": home}
            )
            if not done.get("ok"):
                raise HostFailed(f"{state.host.name}: stack {lock.top}: {done.get('error')}")
    return doc


def _fetch(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    wanted: list[LockEntry],
    target: dict[str, Any],
) -> list[tuple[str, int]]:
    """Obtain `wanted` on the host (`stack_files.obtain_release`), several at once, showing
    files and bytes on the progress display as each arrives."""
    total = len(wanted)
    done: list[int] = []

    def one(entry: LockEntry) -> tuple[str, int]:
        indexes = UV_INDEXES if entry == UV else lock.indexes
        got = obtain_release(ctx, entry, release_path(state, entry), target=target, indexes=indexes)
        done.append(entry.size or 0)
        known = sum(done) / 1e9
        ctx.runner.progress.step(
            ctx.host.name, "stack", f"fetch [{len(done)}/{total}] {known:.2f} GB"
        )
        return got

    # Several files at once: most of a lock's 200 files are small, where one file's lookup,
    # download and store put cost more in round trips than in bytes; the big ones download
    # (and are verified on the host) while the others go on.
    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        return list(pool.map(one, wanted))


def _install(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    doc: dict[str, Any],
    releases: list[Choice],
    entries: list[dict[str, Any]],
    fetch: list[dict[str, Any]],
    python: str,
    record: str,
) -> None:
    """Obtain the files to fetch and uv, then check, verify and sync the env to `entries` on
    the host (`install_lock` ``apply``); a file found corrupt there is fetched again once. Fills
    `doc`."""
    env = str(doc["env"])
    by_dest = {release_path(state, c.entry): c.entry for c in releases}
    by_dest[release_path(state, UV)] = UV
    wanted = [by_dest[e["dest"]] for e in fetch if e["dest"] in by_dest]
    target = _target(state, lock)
    got = _fetch(ctx, state, lock, wanted, target)
    origins = {e.name: where for e, (where, _n) in zip(wanted, got, strict=True)}
    fetched = sum(n for _where, n in got)
    # Files placed in this run were hashed as they arrived: not read again before install.
    placed = {release_path(state, e) for e in wanted}
    entries = [{**e, "checked": e["dest"] in placed} for e in entries]
    progress = posixpath.join(posixpath.dirname(env), f".{posixpath.basename(env)}.progress")
    args = {
        "action": "apply",
        "env": env,
        "record": record,
        "python": python,
        "lock": str(lock.path),
        "entries": entries,
        "verify": target,
        "indexes": list(lock.indexes),
        "uv": {"dest": release_path(state, UV), "version": UV.version},
        "tools": state.paths.join("tools"),
        "cache": _uv_cache(state),
        "progress": progress,
        "timeout": INSTALL_TIMEOUT,
    }
    refetched: list[str] = []
    for _attempt in range(2):
        with poll_progress(ctx, "stack", progress):
            result = ctx.script("install_lock", args, timeout=INSTALL_TIMEOUT)
        corrupt = [by_dest[d] for d in result.get("corrupt") or [] if d in by_dest]
        if result.get("ok") or not corrupt or refetched:
            break
        # A file in the host's releases/ whose bytes are not the lock's (removed there): fetched
        # again through the stores, then everything is checked again.
        refetched = [e.name for e in corrupt]
        ctx.log.warning("corrupt on the host, fetched again: %s", ", ".join(refetched))
        fetched += sum(n for _w, n in _fetch(ctx, state, lock, corrupt, target))
        args["entries"] = [{**e, "checked": False} for e in entries]
    for name, verdict in (result.get("verdicts") or {}).items():
        row = doc["packages"].get(name)
        if row is None:
            continue
        row["verdict"] = "ok" if verdict["ok"] else f"refused: {verdict['refusal']}"
        row["notes"] = verdict["notes"]
        row["checked"] = "sha256, cudart and SASS/PTX read on the host before install"
    if not result.get("ok"):
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {result.get('error')}")
    got_bytes = fetched + sum(n for _, n in result.get("downloaded") or [])
    doc["downloaded_bytes"] = got_bytes
    doc["files_from"] = dict(Counter(origins.values()))
    sync = result.get("sync") or {}
    doc["sync"] = {**sync, "refetched": refetched}
    doc["timings"] = result.get("timings") or {}
    sources = ", ".join(f"{n} from {k}" for k, n in sorted(doc["files_from"].items()))
    did = [f"{len(sync.get(k) or [])} {k}" for k in ("added", "removed", "replaced")]
    parts = [f"synced by uv {UV.version} ({', '.join(did)})"]
    if sync.get("removed"):
        parts.append(f"removed {', '.join(sync['removed'][:5])}")
    if sync.get("remade"):
        parts.append("a broken env was made again")
    if refetched:
        parts.append(f"corrupt on the host and fetched again: {', '.join(refetched)}")
    parts.append(
        f"{result.get('seconds', 0):.1f}s, {got_bytes / 1e9:.2f} GB downloaded by this host "
        f"(files: {sources or 'none fetched'})"
    )
    doc["install_message"] = "; ".join(parts)

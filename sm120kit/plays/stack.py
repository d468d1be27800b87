"""The serving stack on a host: the recipe's lock, installed into its own env, nothing else.

The env is ``<work_root>/envs/stack-<lock file stem>`` (apart from the build env: it holds
exactly the lock's distributions plus what ``python -m venv`` puts in). Each locked file is
obtained for the host by `stack_files.obtain_release` (the controller's own copy, else the
wheel stores, else one host of the run downloads it from the index and the stores take it) into
``<work_root>/releases/<sha256>/<filename>``,
where a rerun finds it. `remote/install_lock.py` then checks every file's sha256 against the
lock and verifies every compiled release for the host's driver and arch before it installs
anything, and uv syncs the env to exactly those files (offline, hashes required). What it
installed is recorded by sha256 beside the env, so a rerun installs and downloads nothing.

The decisions are `stack_steps.plan_stack`'s (a pure function: the lock's files and one probe
of the host in, Steps out). Check mode shows those Steps rendered; provision runs exactly
them, and records the ones that ran as the step's commands.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import secrets
import shlex
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from ..errors import ConnectionLost, HostFailed, RecipeError, one_line
from ..ops.pyenv import choose_python, ensure_env
from ..ops.stack_files import UV, UV_INDEXES, index_problems, obtain_release, tag_problems
from ..output.progress import Meter
from ..remote import script_bundle
from ..remote.lib.cudaarch import parse_cc
from ..runner.build_progress import poll_progress
from ..runner.pool import HostContext
from ..runner.results import StepResult
from ..stack import release_check
from ..stack.catalogue import load_beside
from ..stack.choice import Choice, choose, glibc_problem, not_for_arch, shown, target_of
from ..stack.index_auth import authed
from ..stack.lock import Lock, LockEntry
from ..stack.stack_steps import StackFacts, StackFile, StackPlan, fetch_step, plan_stack
from ..state import PackageRecord, ProvisionState
from ..steps import Step, commands, summary
from .build import ensure_package

INSTALL_TIMEOUT = 4 * 3600.0
#: Seconds between the controller's "still fetching" words to a host filling a new env.
HEARTBEAT_S = 60.0
#: Locked files obtained at once per host (each its own lookup, download and store put).
FETCH_WORKERS = 8


#: How many of the largest files start first, before the pure-Python wheels (the order for a
#: lock whose catalogue does not count every file's modules).
FIRST_LARGEST = 3
#: What one more file costs the fetch beside its bytes, in bytes (its lookup, its request
#: and its round trips over SSH: about 0.1 s each, what 16 MiB take at the 160-180 MB/s the
#: real lock's 4.36 GB came at), so that many small files with a few modules each do not
#: go ahead of one big file with thousands.
FILE_COST_BYTES = 16 << 20


def fetch_order(
    sizes: list[int], pure: list[bool] | None = None, modules: list[int | None] | None = None
) -> list[int]:
    """The order to start a lock's downloads in (indices into `sizes`).

    With every file's `modules` known (the ``.py`` files it holds: the catalogue's
    ``py_files``): by what a file feeds the host's compile workers per byte fetched, modules
    / (size + `FILE_COST_BYTES`), most first; files that feed nothing (the CUDA libraries)
    last, largest first. The host byte-compiles what it installs, compiling is most of its
    work, and what decided a round was when its densest files were in: the real lock's torch
    (2,438 modules in 555 MB) and sglang (4,719 in 39 MB) came last among the compiled files,
    taken by turns with small ones, and their modules reached the workers 25 s in, after
    every file had arrived.

    Else first the `FIRST_LARGEST` largest files, so that the fetch does not end on torch
    (555 MB, near the end of the lock's alphabet) downloading alone. Then the pure-Python
    wheels (`pure`: a ``py3-none-any``-style wheel), biggest first. Then the rest, largest
    and smallest by turns. Ties keep the lock's order."""
    if modules is not None and all(m is not None for m in modules):
        counts = [m or 0 for m in modules]
        return sorted(
            range(len(sizes)),
            key=lambda i: (-counts[i] / float(sizes[i] + FILE_COST_BYTES), -sizes[i], i),
        )
    pure = pure or [False] * len(sizes)
    by_size = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    head = by_size[:FIRST_LARGEST]
    light = [i for i in by_size if pure[i] and i not in head]
    rest = [i for i in by_size if not pure[i] and i not in head]
    order = head + light
    lo, hi = 0, len(rest) - 1
    while lo <= hi:
        order.append(rest[lo])
        lo += 1
        if lo <= hi:
            order.append(rest[hi])
            hi -= 1
    return order


def py_files_of(lock: Lock, entries: list[LockEntry]) -> list[int | None]:
    """Each entry's ``.py`` count from the catalogue beside `lock` (None where it has none)."""
    try:
        cat = load_beside(lock.path.parent)
    except RecipeError:
        cat = None  # a broken catalogue is the recipe check's to report
    out: list[int | None] = []
    for e in entries:
        if e == UV:  # the tool, not installed into the env: nothing of it is compiled
            out.append(0)
            continue
        found = cat.by_sha256(e.sha256) if cat is not None else None
        out.append(found[1].py_files if found is not None else None)
    return out


def pure_python(filename: str) -> bool:
    """Whether a wheel's every tag is platform ``any`` (no compiled code of its own)."""
    try:
        _name, _version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return all(t.platform == "any" for t in tags)


def env_path(state: ProvisionState, lock: Lock) -> str:
    """The serving env of `lock` on this host."""
    return state.paths.join("envs", f"stack-{lock.label}")


def release_path(state: ProvisionState, entry: LockEntry) -> str:
    """Where the host keeps a locked file: by sha256, so one file is fetched once."""
    return state.paths.join("releases", entry.sha256, entry.filename)


def _uv_cache(state: ProvisionState) -> str:
    """uv's cache on the host (beside the env, so uv links from it into the env)."""
    return state.paths.join("cache", "uv")


def build_state(state: ProvisionState, lock: Lock, name: str) -> ProvisionState:
    """The state a stack build runs in: the host's resolved recipe for the lock's torch (a
    build must run against the torch it will be loaded with; `ResolvedRecipe.with_torch`),
    building `name` only. The recipe's own torch is kept when it is the lock's version."""
    resolved = state.resolved
    if lock.torch and Version(resolved.torch.version).public != lock.torch:
        try:
            resolved = resolved.with_torch(
                lock.torch,
                index="pypi",
                cuda=lock.torch_cuda,
                source=f"{lock.path.name} (lock torch)",
            )
        except RecipeError as e:
            raise RecipeError(f"host {state.host.name}: {e}") from None
    built = ProvisionState(state.host, state.facts, resolved, flags=state.flags, wanted=[name])
    built.toolkit = state.toolkit
    built.python, built.stack_lock = state.python, state.stack_lock
    return built


def ensure_stack_builds(
    ctx: HostContext, state: ProvisionState, lock: Lock, builds: list[Choice]
) -> dict[str, PackageRecord]:
    """Build each `build` choice from the recipe's pinned entry (the usual build operation,
    through the wheel cache) in an env with the lock's torch; its wheel is then installed
    into the serving env with the releases."""

    out: dict[str, PackageRecord] = {}
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


@dataclass(frozen=True)
class StackResult:
    """What `ensure_stack` did: the ``stack`` document it reported, and whether its ``stack``
    step changed the host's serving env (False without `install`, and in check mode)."""

    doc: dict[str, Any]
    changed: bool = False


def ensure_stack(
    ctx: HostContext, state: ProvisionState, *, install: bool, recheck: bool = False
) -> StackResult:
    """Choose every locked distribution's source (plan shows it); with `install`, make the
    serving env hold the lock's releases (builds: `ensure_stack_builds`). `recheck`: the probe
    also hashes the env's catalogued shared objects (one changed in place is reinstalled)."""
    lock, choices = choose(
        state.resolved, read_copies=ctx.check_mode or not install, lock=state.stack_lock
    )
    # The python step's interpreter (host_python.py; in plan, maybe one it would install)
    # when it is the lock's Python.
    chosen = state.python
    python = (
        {"path": chosen.path, "version": chosen.version}
        if chosen is not None and chosen.version == lock.python
        else choose_python(state.facts.json, lock.python, state.host.name)
    )
    # Every file, before anything changes: a wheel the host cannot install, or a URL outside
    # the lock's indexes, is refused by plan and provision alike.
    wheels = [c.entry for c in choices if c.source == "release"] + [UV]
    version = ".".join(str(python.get("version") or lock.python).split(".")[:2])
    problems = tag_problems(wheels, state.facts.glibc, state.facts.arch, version)
    problems += index_problems([c.entry for c in choices if c.source == "release"], lock.indexes)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {problems[0]}{more}")
    problem = glibc_problem(lock, state.facts.glibc)
    if problem:
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {problem}")
    env = env_path(state, lock) if install else None
    stack = state.resolved.recipe.stack
    doc = stack_document(lock, choices, env, stack.loaders if stack else {})
    ctx.set(stack=doc)
    if not install:
        return StackResult(doc)
    assert env is not None
    releases = [c for c in choices if c.source == "release"]
    builds = [c for c in choices if c.source == "build"]
    built = ensure_stack_builds(ctx, state, lock, builds)
    for c in builds:
        rec = built[c.entry.name]
        doc["packages"][c.entry.name].update(
            wheel_from=rec.get("wheel_from"), wheel=rec.get("wheel"), built_sha256=rec.get("sha256")
        )
    files = stack_files(state, releases, builds, built)
    facts = stack_facts(state, lock, files, str(python["path"]))
    # The controller's CPU during the step (the whole process's: with several hosts, theirs
    # too), beside the host's own figures in the step's timings (docs/benchmarks.md).
    cpu0 = time.process_time()
    with ctx.step("stack") as step:
        try:
            _stack_step(ctx, state, lock, doc, facts, files, releases, step, recheck)
        except ConnectionLost as exc:
            # Everything the step does is idempotent and the files already placed are kept:
            # once more on a new connection, as a person would run it again (once: a host
            # that drops twice is reported).
            lost = one_line(str(exc))
            ctx.log.warning("stack: %s; running the step once more", lost)
            _stack_step(ctx, state, lock, doc, facts, files, releases, step, recheck)
            step.message = f"{step.message} (run again after: {lost})"
        finally:
            if isinstance(doc.get("timings"), dict):  # an install ran: its figures
                doc["timings"]["controller_cpu_s"] = round(time.process_time() - cpu0, 1)
    return StackResult(doc, changed=step.status == "changed" and not ctx.check_mode)


def _stack_step(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    doc: dict[str, Any],
    facts: StackFacts,
    files: list[StackFile],
    releases: list[Choice],
    step: StepResult,
    recheck: bool = False,
) -> None:
    """The stack step's work: probe the env, plan, and (unless check mode) install."""
    probe = ctx.script(
        "install_lock",
        {
            "action": "probe",
            "env": facts.env,
            "record": facts.record,
            "entries": [f.row() for f in (*files, facts.uv)],
            "hash_shared": recheck,
        },
    )
    for c in releases:
        doc["packages"][c.entry.name]["wheel_from"] = "release"
        doc["packages"][c.entry.name]["index"] = posixpath.dirname(c.entry.url)
    plan = plan_stack(facts, probe)
    if not plan.steps:
        step.message = plan.what
        return
    # What check mode shows is what runs: the same Steps, rendered (people read them summed
    # up: one line for the lock's hundreds of fetches).
    step.summary = summary(plan.steps)
    if not ctx.may_act(step, plan.what, commands(plan.steps)):
        return
    ran = _install(ctx, state, lock, doc, facts, plan)
    step.commands, step.summary = commands(ran), summary(ran)
    step.message = f"{plan.what}: {doc.pop('install_message')}" if plan.drift else plan.what


def stack_files(
    state: ProvisionState,
    releases: list[Choice],
    builds: list[Choice],
    built: dict[str, PackageRecord],
) -> list[StackFile]:
    """The files the env is made of on this host: each release where the host keeps it, then
    each stack build's wheel where the build left it."""
    files = [
        StackFile(
            c.entry.name,
            c.entry.version,
            c.entry.filename,
            c.entry.url,
            c.entry.sha256,
            c.entry.compiled,
            release_path(state, c.entry),
            c.entry.size or 0,
        )
        for c in releases
    ]
    for c in builds:
        wheel = str(built[c.entry.name].get("wheel") or "")
        if wheel:
            sha = str(built[c.entry.name].get("sha256") or "")
            # Our own build: not verified as a release is; smoke judges it, as every build.
            name = posixpath.basename(wheel)
            files.append(
                StackFile(c.entry.name, c.entry.version, name, f"file://{wheel}", sha, False, wheel)
            )
    return files


def stack_facts(
    state: ProvisionState, lock: Lock, files: list[StackFile], python: str
) -> StackFacts:
    """What the stack's plan is made of on this host, apart from its probe."""
    driver, arch = target_of(state.resolved)
    uv = StackFile(
        UV.name,
        UV.version,
        UV.filename,
        UV.url,
        UV.sha256,
        False,
        release_path(state, UV),
        UV.size or 0,
    )
    return StackFacts(
        top=lock.top,
        lock=str(lock.path),
        env=env_path(state, lock),
        python=python,
        files=tuple(files),
        uv=uv,
        uv_version=UV.version,
        tools=state.paths.join("tools"),
        cache=_uv_cache(state),
        cuda_home=state.toolkit.cuda_home if state.toolkit is not None else None,
        driver=driver,
        arch=arch,
        install_timeout=INSTALL_TIMEOUT,
    )


def _fetch(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    wanted: list[LockEntry],
    target: dict[str, Any] | None,
    *,
    meter: Meter | None = None,
    show: bool = True,
    stop: Callable[[], bool] | None = None,
    judged: Collection[str] = (),
) -> list[tuple[str, int]]:
    """Obtain `wanted` on the host (`stack_files.obtain_release`), several at once, counting
    each file placed on `meter` (files, the bytes the lock knows, rate, ETA) and, with `show`,
    showing its words on the progress display as each arrives. Once `stop()` is true the
    files not yet started are skipped (``("skipped", 0)``): the host's install has failed and
    needs no more."""
    total = len(wanted)
    meter = meter or Meter(total, sum(e.size or 0 for e in wanted))

    def one(entry: LockEntry) -> tuple[str, int]:
        if stop is not None and stop():
            return "skipped", 0
        indexes = UV_INDEXES if entry == UV else lock.indexes
        # A file the catalogue judged is not read on the host (its sha256 still is), nor uv
        # (the tool, never installed into the env): it may come from a peer of the run.
        judge = None if entry.sha256 in judged or entry == UV else target
        got = obtain_release(ctx, entry, release_path(state, entry), target=judge, indexes=indexes)
        meter.add(entry.size or 0)
        if show:
            ctx.runner.progress.step(ctx.host.name, "stack", f"fetch {meter.words()}")
        return got

    # Several files at once: most of a lock's 200 files are small, where one file's lookup,
    # download and store put cost more in round trips than in bytes; the big ones download
    # (and are verified on the host) while the others go on.
    order = fetch_order(
        [e.size or 0 for e in wanted],
        [pure_python(e.filename) for e in wanted],
        py_files_of(lock, wanted),
    )
    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        got = list(pool.map(one, [wanted[i] for i in order]))
    out: list[tuple[str, int]] = [("", 0)] * total
    for i, result in zip(order, got, strict=True):
        out[i] = result
    return out


def _judged_by_catalogue(
    lock: Lock, files: tuple[StackFile, ...], target: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """``{sha256: verdict}`` of the compiled files the lock's catalogue read (its facts were
    read from these very files when the lock was drafted): the host checks their sha256 and
    takes these verdicts instead of inflating every shared object again. The others are read
    on the host."""
    try:
        cat = load_beside(lock.path.parent)
    except RecipeError:
        return {}  # a broken catalogue is the recipe check's to report; read on the host
    if cat is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        if f.compiled:
            verdict = release_check.catalogue_verdict(cat, f.name, f.sha256, target)
            if verdict is not None:
                out[f.sha256] = verdict
    return out


def _fetch_while_installing(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    wanted: list[LockEntry],
    args: dict[str, Any],
) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """A new env's install: uv first (the host runs it), then the host's steps (`install_lock`
    ``apply``, whose ``stage`` fills the env as files land) run while the controller fetches
    the rest. A marker file tells the host when the fetches are over, and whether they
    failed; a host that fails first stops the fetches not yet started. Returns (one
    ``(origin, bytes)`` per `wanted` entry, the host's result)."""
    first = [i for i, e in enumerate(wanted) if e == UV]
    rest = [i for i, e in enumerate(wanted) if e != UV]
    got: dict[int, tuple[str, int]] = dict(
        zip(
            first, _fetch(ctx, state, lock, [wanted[i] for i in first], args["verify"]), strict=True
        )
    )
    env = str(args["env"])
    marker = posixpath.join(posixpath.dirname(env), f".{posixpath.basename(env)}.fetched")
    token = secrets.token_hex(8)
    args = {**args, "fetched": {"path": marker, "token": token}}
    box: dict[str, Any] = {}
    placed = Meter(len(rest), sum(wanted[i].size or 0 for i in rest))

    def host() -> None:
        try:
            with poll_progress(ctx, "stack", str(args["progress"]), extra=placed.words):
                box["result"] = ctx.script("install_lock", args, timeout=INSTALL_TIMEOUT)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    quoted = shlex.quote(marker)

    def say(word: str) -> bool:
        # The host may not have made envs/ yet.
        folder = shlex.quote(posixpath.dirname(marker))
        line = shlex.quote(f"{token} {word}")
        command = f"mkdir -p {folder} && printf '%s\\n' {line} > {quoted}"
        return ctx.run(command, what="fetch marker", quiet=True, check=False).ok

    say("fetching")
    over = threading.Event()

    def heartbeat() -> None:  # the host gives up after SILENCE_S without one
        while not over.wait(HEARTBEAT_S):
            try:
                say("fetching")
            except Exception:  # a missed beat is not a failure; ten in a row are, on the host
                pass

    beat = threading.Thread(target=heartbeat, name=f"beat-{ctx.host.name}", daemon=True)
    beat.start()
    thread = threading.Thread(target=host, name=f"stack-{ctx.host.name}", daemon=True)
    thread.start()
    status = "failed: the controller stopped"
    try:
        # Compiled files are verified by the host's stage as they land (not by the fetch).
        fetched = _fetch(
            ctx,
            state,
            lock,
            [wanted[i] for i in rest],
            None,
            meter=placed,
            show=False,
            stop=lambda: not thread.is_alive(),
        )
        status = "ok"
    except Exception as exc:
        status = "failed: " + " ".join(str(exc).split())[:400]
        raise
    finally:
        over.set()
        beat.join()
        told = say(status)
        if told:  # else the host waits on, until its own timeout or the connection's end
            thread.join()
            ctx.run(f"rm -f {quoted}", what="fetch marker", quiet=True, check=False)
        else:
            ctx.log.warning("could not tell the host that the fetches are over (%s)", marker)
            if status == "ok":
                raise HostFailed(f"{ctx.host.name}: could not write {marker} on the host")
    if "error" in box:
        raise box["error"]
    got.update(zip(rest, fetched, strict=True))
    return [got[i] for i in range(len(wanted))], box["result"]


def _install(
    ctx: HostContext,
    state: ProvisionState,
    lock: Lock,
    doc: dict[str, Any],
    facts: StackFacts,
    plan: StackPlan,
) -> list[Step]:
    """Run `plan`: its fetch steps here (the files and uv onto the host), then its host steps
    on the host (`install_lock` ``apply``); a file found corrupt there is fetched again once,
    and the host steps run again. Fills `doc`; returns the steps that ran, in order."""
    by_dest = {f.dest: f for f in (*facts.files, facts.uv)}
    entry_of = {release_path(state, e): e for e in (*lock.packages, UV)}
    # A built wheel is on the host already (the build put it there): nothing to fetch.
    wanted = [entry_of[s["dest"]] for s in plan.fetches if s["dest"] in entry_of]
    target = _target(state, lock)
    ran: list[Step] = list(plan.fetches)
    # Files placed in this run were hashed as they arrived: not read again before install.
    placed = {s["dest"] for s in plan.fetches}
    entries = [{**f.row(), "url": authed(f.url), "checked": f.dest in placed} for f in facts.files]
    judged = _judged_by_catalogue(lock, facts.files, target)
    for e in entries:
        if e["sha256"] in judged:
            e["verdict"] = judged[e["sha256"]]
    env = facts.env
    progress = posixpath.join(posixpath.dirname(env), f".{posixpath.basename(env)}.progress")
    args = {
        "action": "apply",
        "env": env,
        "entries": entries,
        "verify": target,
        "indexes": [authed(i) for i in lock.indexes],
        "steps": plan.host_steps,
        "cleanup": plan.cleanup,
        "progress": progress,
        "timeout": INSTALL_TIMEOUT,
    }
    try:
        if plan.streams:
            got, result = _fetch_while_installing(ctx, state, lock, wanted, args)
        else:
            got = _fetch(ctx, state, lock, wanted, target, judged=judged)
            with poll_progress(ctx, "stack", progress):
                result = ctx.script("install_lock", args, timeout=INSTALL_TIMEOUT)
        origins = {e.name: where for e, (where, _n) in zip(wanted, got, strict=True)}
        fetched = sum(n for _where, n in got)
        refetched: list[str] = []
        for attempt in range(2):
            if attempt:
                with poll_progress(ctx, "stack", progress):
                    result = ctx.script("install_lock", args, timeout=INSTALL_TIMEOUT)
            ran += plan.host_steps[: int(result.get("done") or 0)]
            corrupt = [by_dest[d] for d in result.get("corrupt") or [] if d in by_dest]
            if result.get("ok") or not corrupt or refetched:
                break
            # A file in the host's releases/ whose bytes are not the lock's (removed there): fetched
            # again through the stores, then everything is checked again.
            refetched = [f.name for f in corrupt]
            ctx.log.warning("corrupt on the host, fetched again: %s", ", ".join(refetched))
            again = [entry_of[f.dest] for f in corrupt]
            ran += [fetch_step(f) for f in corrupt]
            fetched += sum(n for _w, n in _fetch(ctx, state, lock, again, target))
            args["entries"] = [{**e, "checked": False} for e in entries]
    finally:
        # Its last reader was the display, now done with it: no run leaves it behind, failed
        # or not (one cut off leaves it to the next run's sweep under the host lock).
        tmp = shlex.quote(progress + ".tmp")
        with contextlib.suppress(Exception):  # a lost connection: the step's own error says so
            ctx.run(
                f"rm -f {shlex.quote(progress)} {tmp}", what="progress", quiet=True, check=False
            )
    for name, verdict in (result.get("verdicts") or {}).items():
        row = doc["packages"].get(name)
        if row is None:
            continue
        row["verdict"] = "ok" if verdict["ok"] else f"refused: {verdict['refusal']}"
        row["notes"] = verdict["notes"]
        row["checked"] = (
            "sha256 checked on the host; cudart and SASS/PTX from the catalogue, read from "
            "this very file when the lock was drafted"
            if verdict.get("from") == "catalogue"
            else "sha256, cudart and SASS/PTX read on the host before install"
        )
    if not result.get("ok"):
        raise HostFailed(f"{state.host.name}: stack {lock.top}: {result.get('error')}")
    if not plan.drift:
        return ran  # the .pth file alone
    got_bytes = fetched + sum(n for _, n in result.get("downloaded") or [])
    doc["downloaded_bytes"] = got_bytes
    doc["files_from"] = dict(Counter(origins.values()))
    sync = {**(result.get("sync") or {}), "remade": plan.remade}
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
    return ran

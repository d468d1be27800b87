"""The stack operation as a pure function: what the host has in, the Steps that make its serving
env hold exactly the lock out (`plan_stack`).

`ensure_stack` (plays/stack.py) probes the host once (`install_lock` ``probe``: the env, its
record, its installed distributions, which locked files its ``releases/`` already holds, the
CUDA_HOME of its .pth file) and hands that probe and the lock's files to `plan_stack`. Check
mode shows the Steps it returns (`sm120kit.steps.render`); provision runs exactly them: the
``fetch`` steps on the controller (`stack_files.obtain_release`: the stores, else the index),
every other step on the host, sent as is to `install_lock` ``apply`` (its step interpreter:
``check``, ``unpack``, ``uv``, ``requirements``, ``record``, ``pth`` beside the core ops).
The ``uv`` steps carry the very argv uv is run with on the host.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from ..remote.lib.names import STACK_RECORD
from ..steps import Step

#: Where a new env is made before it is moved into place (whole: never half at the final path).
NEW = ".sm120kit-new"
#: Beside the env while it is synced: uv's requirements file.
SCRATCH = ".sm120kit-scratch"
#: uv's sync: offline, from the listed files only, every hash required, byte-compiled
#: (`SYNC`); after a ``stage``, which compiled the env, without uv's compile pass (`AUDIT`).
AUDIT = ("pip", "sync", "--offline", "--no-index", "--require-hashes")
SYNC = (*AUDIT, "--compile-bytecode")
#: uv's install of the files that have arrived, into a new env while the rest still arrive
#: (`install_lock` ``stage``): no resolver, no compile (the host compiles each distribution's
#: modules itself as it lands: the env's one compile pass; the sync after it runs as `AUDIT`).
STAGE = ("pip", "install", "--offline", "--no-index", "--require-hashes", "--no-deps",
         "--no-compile-bytecode")  # fmt: skip
#: Seconds uv may take to make a venv (a sync gets the install's whole timeout).
VENV_TIMEOUT = 600


@dataclass(frozen=True)
class StackFile:
    """One file the env is made of, where the host keeps it (`dest`)."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    compiled: bool
    dest: str
    size: int = 0  # bytes, when the lock knows (for the plan's message)

    def row(self) -> dict[str, Any]:
        """The file as `install_lock` reads it (its ``entries``)."""
        return {
            "name": self.name,
            "version": self.version,
            "filename": self.filename,
            "url": self.url,
            "sha256": self.sha256,
            "compiled": self.compiled,
            "dest": self.dest,
            "size": self.size,
        }


@dataclass(frozen=True)
class StackFacts:
    """What the plan is made from, apart from the probe: the lock's files for this host, its
    env and the tools' places on the host, the toolkit's CUDA_HOME and the target."""

    top: str
    lock: str  # the lock file (named in the env's record)
    env: str
    python: str  # the interpreter a new env is made with
    files: tuple[StackFile, ...]
    uv: StackFile  # uv's own wheel
    uv_version: str
    tools: str  # <work_root>/tools: uv is unpacked to <tools>/uv-<version>/uv
    cache: str  # uv's cache on the host
    cuda_home: str | None
    driver: str | None
    arch: str | None
    install_timeout: float = 4 * 3600.0

    @property
    def record(self) -> str:
        return posixpath.join(self.env, STACK_RECORD)

    @property
    def uv_bin(self) -> str:
        return posixpath.join(self.tools, f"uv-{self.uv_version}", "uv")


@dataclass(frozen=True)
class StackPlan:
    """The Steps, in order, and why: `drift` (empty: the env is as locked), `pth_ok` (its .pth
    file sets the toolkit's CUDA_HOME). No steps: nothing to do."""

    drift: list[str]
    pth_ok: bool
    what: str
    steps: list[Step] = field(default_factory=list)
    #: Removed on the host when a host step fails (the scratch dir, a half-made new env).
    cleanup: list[str] = field(default_factory=list)

    @property
    def fetches(self) -> list[Step]:
        """The steps the controller runs (the stores, else the index, into ``releases/``)."""
        return [s for s in self.steps if s.op == "fetch"]

    @property
    def host_steps(self) -> list[Step]:
        """The steps `install_lock` ``apply`` runs on the host, in order."""
        return [s for s in self.steps if s.op != "fetch"]

    @property
    def streams(self) -> bool:
        """Whether the host fills a new env while the controller still fetches (``stage``)."""
        return any(s.op == "stage" for s in self.steps)

    @property
    def remade(self) -> bool:
        """Whether a broken env at the final path is removed and made again."""
        return "the env does not work (half-made?): made again" in self.drift


def drift(files: tuple[StackFile, ...], probe: Mapping[str, Any]) -> list[str]:
    """How the env differs from the lock, one phrase per kind (empty: as locked): no env, a
    broken one (cut off while made), distributions missing, at another version or file, not
    in the lock at all (installed behind the tool's back), or (``provision --recheck``: the
    probe hashed the shared objects) a shared object changed in place."""
    if not probe.get("exists"):
        return ["no env yet"]
    if not probe.get("works"):
        return ["the env does not work (half-made?): made again"]
    mine = (probe.get("record") or {}).get("packages") or {}
    have = dict(probe.get("installed") or {})
    want = {str(canonicalize_name(f.name)): f for f in files}
    missing = sorted(k for k in want if k not in have)
    other = sorted(
        k
        for k, f in want.items()
        if k in have and (have[k] != f.version or (mine.get(k) or {}).get("sha256") != f.sha256)
    )
    extra = sorted(f"{k}=={v}" for k, v in have.items() if k not in want)
    changed = [f"{rel} ({dist})" for rel, dist in probe.get("changed") or []]
    out = []
    for label, names in (("missing", missing), ("another version or file", other),
                         ("not in the lock", extra), ("changed in place", changed)):  # fmt: skip
        if names:
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            out.append(f"{label}: {', '.join(names[:5])}{more}")
    return out


def fetch_step(f: StackFile) -> Step:
    # `size` (0: unknown) is for the summary people read (`steps.summary`), not the command.
    return Step("fetch", name=f.name, url=f.url, dest=f.dest, sha256=f.sha256, size=f.size)


def uv_step(facts: StackFacts, *args: str, timeout: float) -> Step:
    """uv run on the host with the env `run_uv` gives it (its cache, no config, no progress)."""
    return Step("uv", argv=[facts.uv_bin, *args], cache=facts.cache, timeout=int(timeout))


def sync_steps(facts: StackFacts, probe: Mapping[str, Any]) -> tuple[list[Step], list[str]]:
    """The host's steps that make the env hold exactly `facts.files`, then record it. An
    existing env: every file checked and verified first (they are on the host by then), then
    synced in place. A new env (none, or a broken one removed): made beside its final place,
    filled by ``stage`` while the controller's fetches still run (each file checked, verified,
    installed and byte-compiled as it arrives), then synced without uv's compile pass (an audit,
    in effect; what it adds is compiled after it) and moved in whole. uv is unpacked first in
    both. Returns (steps, cleanup)."""
    env, scratch = facts.env, facts.env + SCRATCH
    member = f"uv-{facts.uv_version}.data/scripts/uv"
    judged = {
        "files": len(facts.files),
        "compiled": sum(1 for f in facts.files if f.compiled),
        "driver": facts.driver,
        "arch": facts.arch,
    }
    new_env = not probe.get("exists") or not probe.get("works")
    # A live env is changed only after every file was checked; a new one (beside its final
    # place) is filled as the files arrive.
    steps = [] if new_env else [Step("check", **judged)]
    steps.append(Step("unpack", wheel=facts.uv.dest, member=member, dest=facts.uv_bin))
    cleanup = [scratch]
    target = env
    if probe.get("exists") and not probe.get("works"):
        steps.append(Step("remove", path=env))  # half-made: made again
    if new_env:
        target = env + NEW
        cleanup.append(target)
        steps += [
            Step("remove", path=target),  # left by a run cut off while it made the env
            uv_step(
                facts,
                "venv",
                "--relocatable",
                "--python",
                facts.python,
                target,
                timeout=VENV_TIMEOUT,
            ),
        ]
    req = posixpath.join(scratch, "requirements.txt")
    steps += [Step("remove", path=scratch), Step("mkdir", path=scratch)]
    if new_env:
        python = posixpath.join(target, "bin", "python")
        steps.append(
            Step(
                "stage",
                **judged,
                argv=[facts.uv_bin, *STAGE, "--python", python],
                cache=facts.cache,
                scratch=scratch,
                env=target,
                timeout=int(facts.install_timeout),
            )
        )
    # After a stage the env is compiled already: uv's compile pass would only read 35,000 fresh
    # pyc headers again at the end of the step, so the sync audits, and what it adds or
    # rewrites is compiled after it (``compile: "new"``).
    # A distribution whose files changed in place has the locked version: uv would keep it, so
    # it is reinstalled. uv links an env's files from its cache (hard links: `stat -c %h` is 2),
    # so a file edited in place IS uv's cache entry and a plain reinstall links the edited bytes
    # back: the distribution's cache entries go first (uv unpacks the checked wheel again), and
    # the repair copies, so this env's copy no longer shares an inode with the cache.
    again = [] if new_env else sorted({dist for _, dist in probe.get("changed") or []})
    if again:
        steps.append(uv_step(facts, "cache", "clean", *again, timeout=VENV_TIMEOUT))
    sync = uv_step(
        facts,
        *(AUDIT if new_env else SYNC),
        *(word for dist in again for word in ("--reinstall-package", dist)),
        *(("--link-mode", "copy") if again else ()),
        "--python",
        posixpath.join(target, "bin", "python"),
        req,
        timeout=facts.install_timeout,
    )
    if new_env:
        sync["compile"] = "new"
    steps += [
        Step("requirements", path=req, files=[[f.name, f.dest, f.sha256] for f in facts.files]),
        sync,
    ]
    if target != env:
        steps.append(Step("rename", src=target, dest=env))
    packages = {
        str(canonicalize_name(f.name)): {"version": f.version, "sha256": f.sha256}
        for f in facts.files
    }
    steps += [
        Step("remove", path=scratch),
        Step("record", path=facts.record, lock=facts.lock, packages=packages),
    ]
    return steps, cleanup


def plan_stack(facts: StackFacts, probe: Mapping[str, Any]) -> StackPlan:
    """The stack operation: facts and the host's probe in, the Steps out (none: as locked)."""
    why = drift(facts.files, probe)
    pth_ok = probe.get("cuda_home") == facts.cuda_home
    n = len(facts.files)
    if not why and pth_ok:
        what = f"{facts.top}: {n} distributions installed in {facts.env} as locked"
        if facts.cuda_home:
            what += f", CUDA_HOME {facts.cuda_home}"
        return StackPlan(why, pth_ok, what)
    steps: list[Step] = []
    cleanup: list[str] = []
    if why:
        present = set(probe.get("present") or [])
        fetch = [f for f in facts.files if f.dest not in present]
        size = sum(f.size for f in fetch)
        have = f", {n - len(fetch)} on the host already" if len(fetch) < n else ""
        what = (
            f"install exactly the {n} locked distributions of {facts.top} into {facts.env} "
            f"({'; '.join(why)}; {len(fetch)} files to fetch, {size / 1e9:.2f} GB known{have})"
        )
        if facts.uv.dest not in present:
            fetch.append(facts.uv)
        steps = [fetch_step(f) for f in fetch]
        host, cleanup = sync_steps(facts, probe)
        steps += host
    else:
        what = f"{facts.top} in {facts.env}: installed as locked"
    if not pth_ok:
        what += f"; CUDA_HOME for its JIT packages: {facts.cuda_home or 'none (no toolkit)'}"
    # A new or synced env gets its .pth again (uv made it without one).
    steps.append(Step("pth", env=facts.env, cuda_home=facts.cuda_home))
    return StackPlan(why, pth_ok, what, steps, cleanup)


__all__ = [
    "NEW",
    "StackFacts",
    "StackFile",
    "StackPlan",
    "drift",
    "plan_stack",
    "sync_steps",
]

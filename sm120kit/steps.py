"""Steps: what an operation does to a host, as data that is both shown and run.

Like pyinfra's operations, an operation computes its steps from the recipe and the host's facts
(a pure function: facts in, steps out) and then either shows them (check mode: `render` gives
the shell lines `plan` prints) or sends the very same list to the hosts' step interpreter
(`sm120kit.remote.lib.steps`, which runs them and cleans up after a failure). What a plan shows
for a step is therefore what provision runs for it.

A `Step` is a JSON object ``{"op": ..., ...}`` (a dict, so it travels to the host as is).
Ops and their fields (the interpreter's docstring says what each does):

=============== ============================================================================
op              fields
=============== ============================================================================
clean           globs
mkdir           path
download        url, dest, sha256 ("" = not verified)
run             argv, cwd?, timeout?
link            target, path
write           path, text, if_missing?
copy            src, dest
rename          src, dest
remove          path
verify          nvcc, release, nvcc_version, toolkit, compile, output (install_cuda)
select          attempts, want (make_env: pip's dry run picks torch's file)
install_torch   argv, requirement, sources (make_env)
inspect         python (make_env: the env's facts as JSON, remote/lib/in_target/env_facts.py)
marker          path, spec, tools (make_env: the env's completeness marker)
patch           tree, patches (patch_tree: apply the patches, all or none)
fetch           name, url, dest, sha256 (the stack: run by the controller, the stores first)
check           files, compiled, driver, arch (install_lock: sha256 of every file, then
                verify the compiled ones for the target)
unpack          wheel, member, dest (install_lock: one file of a wheel, once)
uv              argv, cache, timeout, compile? (install_lock: uv with its cache, no
                config; compile "new": then byte-compile what a sync added or replaced)
requirements    path, files ([name, path, sha256]: uv's requirements file)
record          path, lock, packages (install_lock: what the env holds, by sha256)
pth             env, cuda_home (install_lock: the env's CUDA_HOME .pth file, or none)
upload          src, dest (run by the controller: a file of its own onto the host)
script          name, python, args, path? (run by the controller: a remote script with its
                JSON arguments, `sm120kit.remote`, `path` in front of the host's PATH; an
                answer without ``ok`` fails the step)
build           args (build_wheel.py's arguments: the build front end run in args["src"])
=============== ============================================================================
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from .remote.lib.frontend import build_command
from .remote.lib.names import CUDA_HOME_PTH, CUDA_HOME_PTH_LINE


class Step(dict[str, Any]):
    """One step: ``Step("mkdir", path="/w/x")`` is ``{"op": "mkdir", "path": "/w/x"}``."""

    def __init__(self, op: str, **fields: Any) -> None:
        if op not in RENDERERS:
            raise ValueError(f"unknown step op {op!r}")
        super().__init__(op=op, **fields)

    @property
    def op(self) -> str:
        return str(self["op"])


def _q(path: str) -> str:
    return shlex.quote(path)


def _qglob(pattern: str) -> str:
    """Quote a glob's directory but keep its wildcard visible to the shell."""
    head, tail = posixpath.split(pattern)
    return f"{_q(head)}/{tail}"


def _write(step: Mapping[str, Any]) -> list[str]:
    lines = " ".join(_q(line) for line in step["text"].splitlines())
    cmd = f"printf '%s\\n' {lines} > {_q(step['path'])}"
    return [f"[ -e {_q(step['path'])} ] || {cmd}" if step.get("if_missing") else cmd]


def _download(step: Mapping[str, Any]) -> list[str]:
    check = step["sha256"] or "not verified: cuda.sha256 is unknown"
    return [f"download {step['url']} -> {step['dest']} (sha256 {check})"]


def _select(step: Mapping[str, Any]) -> list[str]:
    tries = [shlex.join(a["argv"]) for a in step["attempts"]]
    flavour = step["want"]["flavour"]
    return [" || ".join(tries) + f"  # dry run: which file; refuse a build other than {flavour}"]


def _install_torch(step: Mapping[str, Any]) -> list[str]:
    sources = step.get("sources") or [[]]
    index = shlex.join(sources[0]) if len(sources) == 1 else "<index options that offered it>"
    return [" ".join(x for x in (shlex.join(step["argv"]), index, step["requirement"]) if x)]


def _copy(step: Mapping[str, Any]) -> list[str]:
    parent = posixpath.dirname(step["dest"])
    return [
        f"rm -rf {_q(step['dest'])} && mkdir -p {_q(parent)} && "
        f"cp -a {_q(step['src'])} {_q(step['dest'])}"
    ]


def _uv_env(step: Mapping[str, Any]) -> str:
    # run_uv's environment on the host (remote/lib/uv_sync.py), spelled as a shell line.
    return f"env -u VIRTUAL_ENV UV_CACHE_DIR={_q(step['cache'])} UV_NO_CONFIG=1 UV_NO_PROGRESS=1"


def _uv(step: Mapping[str, Any]) -> list[str]:
    line = f"{_uv_env(step)} {shlex.join(step['argv'])}"
    if step.get("compile") == "new":
        line += " (then byte-compile what it added or replaced)"
    return [line]


def _check(step: Mapping[str, Any]) -> list[str]:
    return [
        f"check the sha256 of the {step['files']} files against the lock, then verify the "
        f"{step['compiled']} compiled ones for driver {step['driver']}, arch {step['arch']}"
    ]


def _stage(step: Mapping[str, Any]) -> list[str]:
    env = _uv_env(step)
    batch = posixpath.join(step["scratch"], "stage-N.txt")
    return [
        f"as each of the {step['files']} files arrives: check its sha256 against the lock (and "
        f"verify each of the {step['compiled']} compiled ones for driver {step['driver']}, arch "
        f"{step['arch']}), then {env} {shlex.join(step['argv'])} -r {batch} and byte-compile "
        "its modules (then every other .py under site-packages)"
    ]


def _unpack(step: Mapping[str, Any]) -> list[str]:
    dest = _q(step["dest"])
    return [
        # The shell equivalent of remote/lib/uv_sync.unpack, whose temporary is its own.
        f"[ -x {dest} ] || {{ unzip -p {_q(step['wheel'])} {_q(step['member'])} > {dest}.$$.part "
        f"&& chmod 755 {dest}.$$.part && mv {dest}.$$.part {dest}; }}"
    ]


def _requirements(step: Mapping[str, Any]) -> list[str]:
    n = len(step["files"])
    return [f"write {step['path']}: {n} lines 'NAME @ file://PATH --hash=sha256:SHA256'"]


def _pth(step: Mapping[str, Any]) -> list[str]:
    pth = f"{step['env']}/lib/python*/site-packages/{CUDA_HOME_PTH}"
    if not step["cuda_home"]:
        return [f"rm -f {pth}"]
    line = (CUDA_HOME_PTH_LINE % str(step["cuda_home"])).rstrip("\n")
    return [f"printf '%s\\n' {_q(line)} > {pth}"]


def _script(step: Mapping[str, Any]) -> list[str]:
    # As `sm120kit.remote.script_command` shows a script run, with the script's name.
    shown = json.dumps(step["args"], sort_keys=True)
    path = f'PATH={_q(":".join(step["path"]))}:"$PATH" ' if step.get("path") else ""
    return [
        f"{path}{_q(step['python'])} - {_q(shown)}  # remote/{step['name']}.py, program and "
        "arguments on stdin"
    ]


def _build(step: Mapping[str, Any]) -> list[str]:
    # build_wheel.py runs the front end in src, into a fresh temp dir under out_dir, with the
    # toolkit's bin/ first on PATH (remote/build_wheel.py).

    args = step["args"]
    env = " ".join(f"{k}={_q(v)}" for k, v in sorted(args["env"].items()))
    cmd = build_command(args, posixpath.join(args["out_dir"], ".tmp-build-XXXXXXXX"))
    return [f"cd {_q(args['src'])} && {env} {shlex.join(cmd)}  # remote/build_wheel.py"]


RENDERERS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "clean": lambda s: [f"rm -rf {' '.join(_qglob(g) for g in s['globs'])}"],
    "mkdir": lambda s: [f"mkdir -p {_q(s['path'])}"],
    "download": _download,
    "run": lambda s: [shlex.join(s["argv"])],
    "link": lambda s: [f"ln -sfn {_q(s['target'])} {_q(s['path'])}"],
    "write": _write,
    "copy": _copy,
    "rename": lambda s: [f"rm -rf {_q(s['dest'])} && mv -T {_q(s['src'])} {_q(s['dest'])}"],
    "remove": lambda s: [f"rm -rf {_q(s['path'])}"],
    "verify": lambda s: [f"{_q(s['nvcc'])} --version", shlex.join(s["compile"])],
    "select": _select,
    "install_torch": _install_torch,
    "inspect": lambda s: [f"{_q(s['python'])} -c '<print interpreter and torch facts as JSON>'"],
    "marker": lambda s: [f"write {s['path']} (spec {s['spec']}, tools {s['tools']})"],
    "patch": lambda s: [f"patch_tree {s['tree']}: {', '.join(p['name'] for p in s['patches'])}"],
    "fetch": lambda s: [f"fetch {s['url']} -> {s['dest']} (sha256 {s['sha256']})"],
    "check": _check,
    "stage": _stage,
    "unpack": _unpack,
    "uv": _uv,
    "requirements": _requirements,
    "record": lambda s: [
        f"write {s['path']}: lock {s['lock']}, {len(s['packages'])} installed by sha256"
    ],
    "pth": _pth,
    "upload": lambda s: [f"upload {s['src']} -> {s['dest']}"],
    "script": _script,
    "build": _build,
}


def render(step: Mapping[str, Any]) -> list[str]:
    """The shell lines of one step, as `plan` shows them."""
    renderer = RENDERERS.get(step["op"])
    if renderer is None:
        raise ValueError(f"unknown step op {step['op']!r}")
    return renderer(step)


def commands(steps: Iterable[Mapping[str, Any]]) -> list[str]:
    """The shell lines of every step, in order."""
    return [line for step in steps for line in render(step)]


#: A run of at least this many steps of one op with a summariser is shown as one line.
SUMMARY_RUN = 4


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL (never its userinfo)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return "file://"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def _fetch_summary(steps: list[Mapping[str, Any]]) -> str:
    by_origin = Counter(_origin(str(s["url"])) for s in steps)
    known = sum(int(s.get("size") or 0) for s in steps)
    size = f", {known / 1e9:.2f} GB known" if known else ""
    origins = ", ".join(f"{o} ({n})" for o, n in by_origin.most_common())
    homes = {posixpath.dirname(posixpath.dirname(str(s["dest"]))) for s in steps}
    into = f" into {homes.pop()}/<sha256>/" if len(homes) == 1 else ""
    return (
        f"fetch {len(steps)} files{size}, each sha256-pinned: the wheel stores first, else "
        f"{origins}{into} (--verbose lists each)"
    )


#: Ops whose long runs `summary` shows as one line (their steps -> the line).
SUMMARISERS: dict[str, Callable[[list[Mapping[str, Any]]], str]] = {"fetch": _fetch_summary}


def summary(steps: Iterable[Mapping[str, Any]]) -> list[str]:
    """The lines people read for `steps`: `commands`, but each run of `SUMMARY_RUN` or more
    consecutive steps of an op with a summariser (a lock's 207 ``fetch`` steps) as one line
    that counts them (``--verbose`` and ``--json`` keep every command)."""
    out: list[str] = []
    run: list[Mapping[str, Any]] = []

    def flush() -> None:
        if len(run) >= SUMMARY_RUN:
            out.append(SUMMARISERS[run[0]["op"]](run))
        else:
            out.extend(line for step in run for line in render(step))
        run.clear()

    for step in steps:
        if run and step["op"] != run[0]["op"]:
            flush()
        if step["op"] in SUMMARISERS:
            run.append(step)
        else:
            out.extend(render(step))
    flush()
    return out

"""Step ``source:<pkg>``: where a package's source comes from, and its pristine tree on the host.

The source is resolved on the controller first (`plan_source`: an index's sdist and its
sha256, a git commit, a local tree packed and hashed, or the controller's source store), then
``remote/fetch_source.py`` unpacks it under ``work_root/src/<pkg>-<ver>-<digest>``. That
directory stays pristine: it is never patched or built in. The change is planned as Steps
(`source_steps`: upload the controller's tarball, run fetch_source with its arguments): plan
shows them, provision runs them (`step_run.run_steps`).
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..builds import sources as srcstore
from ..builds.packing import pack_tree
from ..builds.source_store import Source, store_record
from ..errors import HostFailed, RecipeError
from ..remote.lib import sourcetree as fs
from ..runner.host_context import HostContext
from ..runner.pool import Runner
from ..runner.step_run import run_steps
from ..state import ProvisionState
from ..steps import Step, commands


def _once(runner: Runner, key: str, compute: Callable[[], Any]) -> Any:
    """`compute()` once per run and key, whichever host thread asks first."""
    return runner.shared.once(key, compute)


@dataclass
class SourcePlan:
    """Where a package's source comes from, known on the controller before touching a host."""

    kind: str  # fetch_source kind: sdist | git | path
    args: dict[str, Any]  # fetch_source arguments without dest/cache_dir
    digest: str  # the key's source digest (sha256:/git:/tree:), "" while a git ref is unresolved
    dir_digest: str  # what names the source directory
    what: str  # one line for messages
    local_tarball: str | None = None  # path kind: the packed tree on the controller
    remote_name: str = ""  # the tarball's name on the host (default: its local name)


def repo_root(state: ProvisionState) -> Path:
    """The directory ``path`` sources are relative to: the one holding recipes/ and patches/."""
    return state.resolved.recipe.patches_dir.parent


def index_sdist(index_url: str, package: str, version: str) -> tuple[str, str]:
    """(url, sha256) of `package` `version`'s sdist on a PEP 691/503 simple index."""
    try:
        sdists = fs.sdist_links(index_url, package, version)
    except fs.FetchError as exc:
        raise HostFailed(f"{package}: {exc}") from None
    for _filename, url, sha in sdists:
        if sha:
            return url, sha
    raise HostFailed(
        f"{package}: the index lists no sha256 for {sdists[0][0]}; "
        "the download could not be verified"
    )


def git_resolve(url: str, ref: str) -> str:
    """The full commit id of `ref` (a full id is returned as is; else `git ls-remote`)."""
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref
    proc = subprocess.run(
        ["git", "ls-remote", url, ref], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    line = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not line:
        raise RecipeError(
            f"git ref {ref!r} of {url} is not a full commit id and `git ls-remote` cannot "
            "resolve it: pin a full commit (recipe.packages.<pkg>.source.ref)"
        )
    return line[0].split()[0]


def plan_source(ctx: HostContext, state: ProvisionState, name: str) -> SourcePlan:
    """Resolve the package's source on the controller: nothing runs on the host."""
    pkg = state.resolved.packages[name]
    source, version = pkg.source, pkg.version
    kind = source.get("kind")
    # A pin that is not the release's own tree says what it is wherever the source is named.
    note = f" ({source['note']})" if source.get("note") else ""
    if kind == "git" and srcstore.is_managed(pkg):
        return _store_plan(ctx, state, srcstore.entries(name, pkg)[0], f"{name} {version}", note)
    if kind == "pypi":
        index = source.get("index") or "pypi"
        index_url = fs.DEFAULT_INDEX if index in ("pypi", "") else index
        if source.get("sha256"):
            sha, url = source["sha256"], ""
        else:
            url, sha = _once(
                ctx.runner,
                f"index:{index_url}:{name}:{version}",
                lambda: index_sdist(index_url, name, version),
            )
        args: dict[str, Any] = {
            "kind": "sdist",
            "package": name,
            "version": version,
            "sha256": sha,
            "index_url": index_url,
        }
        if url:
            args["url"] = url
        return SourcePlan("sdist", args, f"sha256:{sha}", sha, f"{name} {version} sdist ({index})")
    if kind == "git":
        url, ref, subdir = source["url"], source["ref"], source.get("subdir") or ""
        args = {"kind": "git", "repo": url, "commit": ref, "subdir": subdir}
        digest = f"git:{ref}" if re.fullmatch(r"[0-9a-f]{40}", ref) else ""
        where = f"{url}@{ref}" + (f":{subdir}" if subdir else "")
        return SourcePlan("git", args, digest, ref, f"{name} {version} from {where}{note}")
    if kind == "path":
        root = Path(source["path"])
        if not root.is_absolute():
            root = repo_root(state) / root
        root = root.resolve()
        if not root.is_dir():
            raise RecipeError(
                f"package {name}: source path {root} is not a directory "
                f"({state.resolved.sources.get(f'packages.{name}.source.path', 'recipe')})"
            )
        out = Path(str(ctx.runner.run_dir or tempfile.gettempdir())) / "sources"
        tarball, digest = _once(
            ctx.runner,
            f"path:{root}",
            lambda: pack_tree(root, out, f"{name}-{version}"),
        )
        args = {"kind": "path", "tree_sha256": digest}
        return SourcePlan(
            "path", args, f"tree:{digest}", digest, f"{name} {version} from {root}", str(tarball)
        )
    raise RecipeError(f"package {name}: source kind {kind!r} cannot be fetched")


def _store_plan(
    ctx: HostContext, state: ProvisionState, entry: srcstore.SourceEntry, what: str, note: str = ""
) -> SourcePlan:
    where = f"{entry.url}@{entry.ref}" + (f":{entry.subdir}" if entry.subdir else "") + note
    record = store_record(ctx, state, entry)
    if record is None:
        return SourcePlan(
            "path",
            {"kind": "path"},
            "",
            entry.ref,
            f"{what} from {where} (not in the controller's source store yet)",
        )
    digest = str(record["digest"])
    return SourcePlan(
        "path",
        {"kind": "path", "tree_sha256": digest},
        f"tree:{digest}",
        digest,
        f"{what} from {where} via the source store",
        str(record["tarball"]),
        f"{entry.dir}-{digest[:12]}.tar",
    )


def ensure_source(ctx: HostContext, state: ProvisionState, name: str) -> Source:
    """Step ``source:<pkg>``: the pinned, verified, pristine source tree on the host."""
    version = state.resolved.packages[name].version
    with ctx.step(f"source:{name}") as step:
        plan = plan_source(ctx, state, name)
        dest = state.paths.source(name, version, plan.dir_digest)
        remote_tar = posixpath.join(
            state.paths.downloads, plan.remote_name or os.path.basename(plan.local_tarball or "")
        )
        args = {**plan.args, "dest": dest, "cache_dir": state.paths.downloads}
        if plan.kind == "path" and not plan.local_tarball:
            # Check mode, and the source store lacks it: nothing to compare yet.
            ctx.may_act(
                step,
                f"fetch {plan.what} into the source store and upload it",
                [f"invoke sources.fetch --package {name}"],
            )
            return Source(dest, "", False)
        if plan.local_tarball:
            args["tarball"] = remote_tar
        marker = ctx.read_json(posixpath.join(dest, fs.MARKER))
        if fs.matches(marker, fs.identity(args)):
            step.message = f"{plan.what}: {dest}"
            return Source(dest, plan.digest or _git_digest(marker), True)
        steps = source_steps(
            args, ctx.host.python, plan.local_tarball, state.paths.downloads, remote_tar
        )
        if not ctx.may_act(step, f"fetch {plan.what} into {dest}", commands(steps)):
            return Source(dest, plan.digest, False)
        step.commands = commands(steps)
        doc = run_steps(
            ctx,
            steps,
            failed=lambda _s, doc: f"{name}: fetching {plan.what} failed: {doc.get('error')}",
            timeout=3 * 3600,
        )
        step.message = f"fetched {plan.what} into {dest}"
        return Source(dest, plan.digest or _git_digest(doc), True)


def source_steps(
    args: dict[str, Any],
    python: str,
    tarball: str | None,
    downloads: str,
    remote_tar: str,
) -> list[Step]:
    """The source operation's change as Steps: a controller tarball (a local tree or the source
    store's) uploaded first, then `fetch_source` with `args` unpacks or fetches the pristine
    tree (and writes its marker)."""
    steps: list[Step] = []
    if tarball:
        steps += [Step("mkdir", path=downloads), Step("upload", src=tarball, dest=remote_tar)]
    return [*steps, Step("script", name="fetch_source", python=python, args=args)]


def _git_digest(doc: dict[str, Any] | None) -> str:
    ident = (doc or {}).get("identity") or {}
    resolved = ident.get("resolved") or ident.get("commit") or ""
    return f"git:{resolved}" if resolved else ""


def _q(text: str) -> str:
    return shlex.quote(text)


__all__ = [
    "Source",
    "SourcePlan",
    "ensure_source",
    "git_resolve",
    "index_sdist",
    "plan_source",
    "repo_root",
    "source_steps",
]

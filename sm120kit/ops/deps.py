"""Step ``deps:<pkg>``: a store-managed package's build dependencies on the host.

Each dependency (`sm120kit.builds.sources`: a recipe ``dependencies`` entry, fetched into the
controller's source store) is uploaded as its deterministic tarball and unpacked by
``remote/fetch_source.py`` (kind ``path``, tree hash checked) into
``work_root/src/<dir>-<ref[:12]>-<digest[:12]>``; a tree already there with the same hash is
left alone. The uploads are planned as Steps (`deps_steps`: upload, unpack, remove the
tarball, per tree), which plan shows and provision runs (`step_run.run_steps`). The result
names each tree's absolute path for ``FETCHCONTENT_SOURCE_DIR_<NAME>`` and its digest for the
wheel-cache key.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..builds import sources as srcstore
from ..builds.source_store import store_record
from ..remote.lib import sourcetree as fs
from ..runner.pool import HostContext
from ..runner.step_run import run_steps
from ..state import ProvisionState
from ..steps import Step, commands

_SEP = "--sm120kit-marker--"


@dataclass
class Dependencies:
    """Where each dependency is (or will be) on the host, and what it is."""

    dirs: list[tuple[str, str]] = field(default_factory=list)  # (FetchContent name, path)
    digests: tuple[tuple[str, str], ...] = ()  # (dir, "tree:<hex>")
    rows: list[dict[str, str]] = field(default_factory=list)  # --explain: trees not stored yet
    reasons: dict[str, str] = field(default_factory=dict)  # FetchContent name -> what it is
    complete: bool = True  # every tree's digest is known (check mode may not know)


def _markers(ctx: HostContext, paths: list[str]) -> list[dict[str, Any] | None]:
    """The fetch markers at `paths`, read in one command (None where absent or unreadable)."""

    if not paths:
        return []
    script = "; ".join(
        f"(cat {shlex.quote(p)} 2>/dev/null || true); echo; echo {_SEP}" for p in paths
    )
    res = ctx.run(script, check=False)
    out: list[dict[str, Any] | None] = []
    for chunk in res.stdout.split(_SEP)[: len(paths)]:
        try:
            value = json.loads(chunk.strip()) if chunk.strip() else None
        except ValueError:
            value = None
        out.append(value if isinstance(value, dict) else None)
    return out + [None] * (len(paths) - len(out))


def ensure_dependencies(ctx: HostContext, state: ProvisionState, name: str) -> Dependencies | None:
    """The package's dependency trees on the host; None for a package without any."""
    pkg = state.resolved.packages[name]
    if not srcstore.is_managed(pkg):
        return None
    wanted = srcstore.entries(name, pkg)[1:]
    deps = Dependencies()
    with ctx.step(f"deps:{name}") as step:
        records = [store_record(ctx, state, e) for e in wanted]
        placed: list[tuple[srcstore.SourceEntry, dict[str, Any], str]] = []
        missing = []
        digests = []
        for entry, record in zip(wanted, records, strict=True):
            if record is None:
                missing.append(entry.dir)
                deps.rows.append(
                    {
                        "name": entry.define,
                        "value": f"{entry.url}@{entry.ref}",
                        "reason": "dependency "
                        f"{entry.dir}: not in the controller's source store yet (sources.fetch)",
                    }
                )
                continue
            dest = state.paths.source(entry.dir, entry.ref[:12], str(record["digest"]))
            placed.append((entry, record, dest))
            digests.append((entry.dir, f"tree:{record['digest']}"))
            deps.dirs.append((entry.fetchcontent, dest))
            note = f"; {record['note']}" if record.get("note") else ""
            deps.reasons[entry.fetchcontent] = (
                f"dependency {entry.dir} at {entry.ref} ({entry.url}), tree "
                f"{str(record['digest'])[:16]}, {record.get('origin', '')}{note}"
            )
        deps.digests = tuple(digests)
        deps.complete = not missing
        markers = _markers(ctx, [posixpath.join(d, fs.MARKER) for _, _, d in placed])
        todo = [
            (entry, record, dest)
            for (entry, record, dest), marker in zip(placed, markers, strict=True)
            if not fs.matches(
                marker, {"kind": "path", "tree_sha256": record["digest"], "subdir": ""}
            )
        ]
        if not todo and not missing:
            step.message = f"{len(placed)} dependency trees present"
            return deps
        names = [e.dir for e, _, _ in todo] + missing
        uploads = [(e.dir, str(r["tarball"]), str(r["digest"]), dest) for e, r, dest in todo]
        steps = deps_steps(uploads, state.paths.downloads, ctx.host.python)
        shown = commands(steps)
        # Check mode, trees the source store lacks: provision fetches them there first.
        shown += [f"invoke sources.fetch --package {name}  # {d}" for d in missing]
        if not ctx.may_act(
            step, f"upload {len(names)} dependency trees: {', '.join(names)}", shown
        ):
            return deps
        step.commands = commands(steps)
        dir_of = {dest: e.dir for e, _, dest in todo}
        run_steps(
            ctx,
            steps,
            failed=lambda s, doc: (
                f"{name}: unpacking dependency {dir_of[s['args']['dest']]} failed: "
                f"{doc.get('error')}"
            ),
            timeout=3600,
        )
        step.message = f"uploaded {len(todo)} of {len(placed)} dependency trees"
        return deps


def deps_steps(uploads: list[tuple[str, str, str, str]], downloads: str, python: str) -> list[Step]:
    """The dependency trees' change as Steps, for `uploads` ([(dir, controller tarball, tree
    digest, dest on the host)]): each tarball uploaded, unpacked by `fetch_source` (which
    checks its tree digest and writes the tree's marker), then removed from the host."""
    if not uploads:
        return []
    steps = [Step("mkdir", path=downloads)]
    for directory, tarball, digest, dest in uploads:
        remote = posixpath.join(downloads, f"{directory}-{digest[:12]}.tar")
        args = {
            "kind": "path",
            "tarball": remote,
            "tree_sha256": digest,
            "dest": dest,
            "cache_dir": downloads,
        }
        steps += [
            Step("upload", src=tarball, dest=remote),
            Step("script", name="fetch_source", python=python, args=args),
            Step("remove", path=remote),
        ]
    return steps

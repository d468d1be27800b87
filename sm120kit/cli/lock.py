"""The task layer of `invoke lock.draft`: a lock drafted from a top-level requirement, and the
recipe's ``[stack]`` edit, for a person to review (`sm120kit.stack.draft` does the work;
output.stack prints)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from .. import drivers as drv
from ..errors import RecipeError
from ..output import stack as stack_out
from ..output.console import show_document
from ..preflight.recheck import recheck_rules
from ..recipes.select import default_recipes_dir, load_recipes
from ..remote.lib.names import dist_name
from ..stack.catalogue import FILE_NAME, Catalogue, carry_when, load_beside, save
from ..stack.catalogue_read import lock_entries, lock_entries_by_file, make_catalogue
from ..stack.constraints import merged, parse_constraint, read_beside, write_beside
from ..stack.convert import convert_lock
from ..stack.draft import (
    Target,
    cached_copy,
    default_lock_name,
    finish_lock,
    index_list,
    obtain,
    release_cache,
    resolve_python,
    review,
    stack_table,
)
from ..stack.lock import Lock, LockEntry, dump_lock, locks_root
from ..stack.resolve import check_index, parse_pin, parse_python, python_versions, uv_platform
from ..stack.wheel_owners import check_entries, noted
from ..stack.write import change_line, check_writable, write_lock
from .core import settings


def recipe_floor(drivers: SpecifierSet) -> str:
    """The lowest driver a recipe's range admits (its ``>=`` bound), or SM120's minimum."""
    lows = [s.version for s in drivers if s.operator == ">="]
    if not lows:
        return drv.SM120_MIN_DRIVER
    return max(lows, key=drv.parse_driver_version)


def _pythons(
    f: dict[str, Any], recipe: Any, top: str, indexes: list[str]
) -> tuple[list[str], bool]:
    """The Pythons to lock for and whether they were asked for (``--lock-python``, comma
    separated) or found: every X.Y the top release has CPython wheels for on the first
    index, else the recipe's Pythons, else 3.11."""
    given = f.get("lock_python")
    if given:
        items = [parse_python(p.strip(), "--lock-python") for p in str(given).split(",")]
        return list(dict.fromkeys(items)), True
    found = python_versions(top, indexes[0])
    if found:
        return found, False
    want = recipe.python if recipe is not None else "3.11"
    return ([want] if isinstance(want, str) else list(want)), False


def draft_command(c: Any, **f: Any) -> None:
    """Resolve --top with uv for each Python, verify the compiled wheels for the recipe's
    lowest driver and its arch, write each lock (a new file, or a complete replacement with
    its difference shown), print what to review and the [stack] table."""

    if not f.get("top"):
        raise RecipeError("--top is required (e.g. --top sglang==0.5.23)")
    top = parse_pin(f["top"], "--top")
    platform = f.get("platform") or "manylinux_2_34_x86_64"
    uv_platform(platform)  # checks the tag before anything runs
    conf = settings(c)
    recipe = None
    if f.get("recipe"):
        recipes = load_recipes(conf.get("recipes_dir"))
        recipe = recipes.get(f["recipe"])
        if recipe is None:
            raise RecipeError(
                f"--recipe {f['recipe']}: no such recipe (have {', '.join(sorted(recipes))})"
            )
    raw_index = f.get("index") or []
    given = [raw_index] if isinstance(raw_index, str) else list(raw_index)
    stack_indexes = list(recipe.stack.indexes) if recipe is not None and recipe.stack else []
    indexes = index_list(None, [*given, *stack_indexes])
    root = locks_root(Path(conf.get("recipes_dir") or default_recipes_dir()).resolve().parent)
    if f.get("out"):  # before any index is asked: a draft that cannot be written is not run
        given_out = Path(f["out"])
        check_writable(given_out if given_out.is_absolute() else root / given_out, "--out")
    raw_given = f.get("constraint") or []
    flagged = [raw_given] if isinstance(raw_given, str) else list(raw_given)
    given_constraints = [parse_constraint(c, "--constraint") for c in flagged]
    for index in indexes:
        check_index(index, top.split("==")[0])  # a dead index is a connection problem, named
    pythons, asked = _pythons(f, recipe, top, indexes)
    if f.get("out") and len(pythons) != 1:
        raise RecipeError(
            f"--out {f['out']}: names one file, but {len(pythons)} Pythons are to be locked "
            f"({', '.join(pythons)}): give one with --lock-python, or leave --out out"
        )
    outs = {}
    for py in pythons:
        name = f.get("out") or default_lock_name(top, py, platform)
        outs[py] = Path(name) if os.path.isabs(name) else root / name
        check_writable(outs[py], "--out" if f.get("out") else "the lock")
    lock_dir = outs[pythons[0]].parent
    # The directory's kept constraints and the flags': a re-draft resolves from the same inputs.
    constraints = merged(read_beside(lock_dir), given_constraints)
    driver = f.get("driver") or (recipe_floor(recipe.drivers) if recipe else None)
    arch = f.get("arch") or (recipe.arch[0] if recipe else None)
    quiet = bool(f.get("json"))
    progress = None if quiet else stack_out.progress_line
    resolved, skipped = [], []
    for py in pythons:
        try:
            resolved.append(resolve_python(top, py, platform, indexes, None, constraints))
        except RecipeError as exc:
            if asked or _is_connection(str(exc)):
                raise
            skipped.append(f"Python {py}: {exc}")  # reported once, with the locks written
    if not resolved:
        raise RecipeError(skipped[0].split(": ", 1)[1] if skipped else f"{top}: nothing to lock")
    seen: dict[str, Any] = {}
    cache = release_cache()
    # Every Python's closure is judged before anything is read for the catalogue or written:
    # a package two wheels write with different bytes refuses the draft (wheel_owners).
    benign = {
        item.python: check_entries(
            item.entries,
            python=item.python,
            platform=platform,
            indexes=indexes,
            fetch=_fetcher(cache, progress),
        )
        for item in resolved
    }
    # The catalogue first, from every wheel resolved (pure ones too: cubin sets, "nothing to
    # check"): verification reads its facts (modules without code for the arch, loaders); it
    # is written after the locks.
    arches = (str(arch),) if arch else (tuple(recipe.arch) if recipe else ("12.0",))
    # A directory's catalogue covers every lock in it: the locks of other Pythons kept there
    # (a --lock-python 3.11 redraft beside a cp312 lock) add their wheels, each file once,
    # taken in lock file name order as `lock.catalogue` takes them (the same bytes).
    by_lock = {outs[item.python].name: list(item.entries) for item in resolved}
    for name, entries in lock_entries_by_file(lock_dir, skip=set(by_lock)).items():
        by_lock.setdefault(name, entries)
    every: dict[str, Any] = {}
    for name in sorted(by_lock):
        for entry in by_lock[name]:
            if entry.filename.endswith(".whl"):
                every.setdefault(entry.sha256, entry)
    cat, cat_seconds = make_catalogue(
        list(every.values()), targets=arches, cache=cache, progress=progress
    )
    docs = []
    for item in resolved:
        target = _target(recipe, driver, arch, item.python, cat)
        lock = finish_lock(
            top, item, platform=platform, target=target, cache=cache, progress=progress, seen=seen
        )
        lock = noted(lock, benign[item.python])
        out = outs[item.python]
        header = [
            f"Lock of {top} for Python {item.python} on {platform}: drafted by `invoke lock.draft"
            f" --top {top}{' --recipe ' + recipe.name if recipe else ''}` with {lock.resolver}.",
            "Do not edit by hand: review it (verdicts, notes) and draft again to change it.",
        ]
        changes = write_lock(out, dump_lock(lock, header), lock)
        docs.append(_lock_doc(lock, out, recipe, changes))
    catalogue = save_catalogue(lock_dir, cat, cat_seconds, len(every))
    kept = write_beside(lock_dir, constraints)
    reason = f"{top} for {recipe.name}" if recipe else top
    first = docs[0]
    rel = (
        first["lock"]
        if not str(first["lock"]).startswith(str(root))
        else os.path.relpath(first["lock"], root)
    )
    doc = {
        **first,
        "top": top,
        "platform": platform,
        "pythons": [d["python"] for d in docs],
        "locks": docs,
        "skipped": skipped,
        "stack": stack_table(lock, rel, reason, _shared_stack(recipe), _stack_torch_index(recipe)),
        "recipe": recipe.name if recipe else None,
        "catalogue": catalogue,
        "constraints": {"file": kept, "given": list(constraints)},
        # Preflight's hand-written rules checked against this release (issue 32).
        "rules": [
            f.line() for f in recheck_rules({e.name: e.version for e in lock.packages}, cat, arches)
        ],
    }
    show_document(doc, quiet, _draft_report)


def _fetcher(cache: Path, progress: Any) -> Callable[[LockEntry], Path]:
    """`obtain` into `cache`, saying each file that is downloaded (not already there)."""

    def fetch(entry: LockEntry) -> Path:
        if progress and cached_copy(entry, cache) is None:
            progress(f"{entry.name} {entry.version}: {entry.filename}")
        return obtain(entry, cache)

    return fetch


def _shared_stack(recipe: Any) -> str | None:
    """The shared stack (recipes/shared/stacks.toml) the recipe's ``[stack]`` uses, if any."""
    table = recipe.raw.get("stack") if recipe is not None else None
    use = table.get("use") if isinstance(table, dict) else None
    return use if isinstance(use, str) else None


def _stack_torch_index(recipe: Any) -> str:
    """The torch index of the shared stack line the recipe takes its torch from, else ""."""
    return str(recipe.torch.index) if recipe is not None and recipe.torch_from else ""


def save_catalogue(
    lock_dir: Path, cat: Catalogue, seconds: dict[str, float], wheels: int
) -> dict[str, Any]:
    """Write `cat` as ``catalogue.toml`` in `lock_dir`; what was written, with counts."""
    path = lock_dir / FILE_NAME
    header = [
        f"Release facts of the wheels locked in {lock_dir.name}/, read from the wheels by",
        f"`invoke lock.catalogue --lock-dir locks/{lock_dir.name}` (or lock.draft): do not edit",
        "but a release's `when` ranges (kept on regeneration while its facts read the same).",
        "Only the versions listed and those ranges are known; any other version is unknown.",
    ]
    try:
        before = load_beside(lock_dir)
    except RecipeError:
        before = None  # an unreadable file is replaced whole; it has no ranges to keep
    cat, dropped = carry_when(before, cat)
    state = save(path, cat, header)
    return {
        "catalogue": str(path),
        "file": state,
        "when_dropped": dropped,
        "releases": len(cat.releases),
        "wheels": wheels,
        "modules": sum(len(w.modules) for r in cat.releases for w in r.wheels),
        "not_on": {a: len(cat.not_for_arch(a)) for a in cat.targets},
        "bytes": path.stat().st_size,
        "seconds": round(sum(seconds.values()), 1),
        "slowest": sorted(seconds.items(), key=lambda kv: -kv[1])[:3],
    }


def write_catalogue(
    lock_dir: Path, targets: tuple[str, ...], progress: Any = None
) -> dict[str, Any]:
    """Read every wheel of the locks in `lock_dir` (`catalogue_read.make_catalogue`,
    each file checked against the lock's sha256) and write ``catalogue.toml`` beside them."""
    entries = lock_entries(lock_dir)
    if not entries:
        raise RecipeError(f"{lock_dir}: no lock with a wheel to read")
    cat, seconds = make_catalogue(entries, targets=targets, progress=progress)
    return save_catalogue(lock_dir, cat, seconds, len(entries))


def catalogue_command(c: Any, **f: Any) -> None:
    """Regenerate ``catalogue.toml`` of --lock-dir from its locks' wheels."""

    if not f.get("lock_dir"):
        raise RecipeError("--lock-dir is required (e.g. --lock-dir locks/sglang-0.5.23)")
    conf = settings(c)
    root = locks_root(Path(conf.get("recipes_dir") or default_recipes_dir()).resolve().parent)
    given = Path(f["lock_dir"])
    lock_dir = given if given.is_absolute() else root / given
    if not lock_dir.is_dir():
        raise RecipeError(f"--lock-dir {f['lock_dir']}: not a directory")
    targets = tuple(a.strip() for a in str(f.get("arch") or "12.0").split(",") if a.strip())
    quiet = bool(f.get("json"))
    doc = write_catalogue(lock_dir, targets, None if quiet else stack_out.progress_line)
    show_document(doc, quiet, _catalogue_report)


def _catalogue_report(console: Any, doc: dict[str, Any]) -> None:
    nots = ", ".join(f"{n} modules without code for {a}" for a, n in doc["not_on"].items())
    console.print(
        f"{doc['file']} {doc['catalogue']}: {doc['releases']} releases, {doc['wheels']} wheels, "
        f"{doc['modules']} modules ({nots}), {doc['bytes']:,} bytes, {doc['seconds']} s",
        markup=False,
        highlight=False,
    )
    for line in doc.get("when_dropped") or []:
        console.print(f"  - {line}", markup=False, highlight=False)


def _is_connection(line: str) -> bool:
    return "cannot reach the index" in line or "answered HTTP" in line


def _target(
    recipe: Any, driver: Any, arch: Any, python: str, cat: Catalogue | None = None
) -> Target | None:
    if not (driver and arch):
        return None
    nfa: dict[str, str] = {}
    if recipe is not None:
        for pkg in recipe.packages:
            nfa.update(pkg.not_for_arch)
        if recipe.stack is not None:
            nfa.update(recipe.stack.not_for_arch)
    loaders = dict(recipe.stack.loaders) if recipe is not None and recipe.stack else {}
    if cat is not None:  # the facts of the wheels just read win over the recipe's
        nfa.update(cat.not_for_arch(str(arch)))
        loaders.update(cat.loaders())
    return Target(str(driver), str(arch), python, not_for_arch=nfa, loaders=loaders)


def _lock_doc(lock: Lock, out: Path, recipe: Any, changes: dict[str, Any]) -> dict[str, Any]:
    sources = {}
    if recipe is not None:
        for pkg in recipe.packages:
            sources[dist_name(pkg.name)] = f"{pkg.name} {pkg.version}"
    return {
        "lock": str(out),
        "python": lock.python,
        "torch": lock.torch,
        "torch_cuda": lock.torch_cuda,
        "target": lock.target,
        "packages": len(lock.packages),
        "compiled": sum(1 for e in lock.packages if e.compiled),
        "bytes": sum(e.size or 0 for e in lock.packages),
        "review": review(lock, recipe.torch.version if recipe else None, sources),
        "changes": changes,
    }


def _draft_report(console: Any, doc: dict[str, Any]) -> None:
    for line in doc.get("skipped") or []:
        console.print(f"skipped {line}", markup=False, highlight=False)
    if doc.get("catalogue"):
        _catalogue_report(console, doc["catalogue"])
    kept = doc.get("constraints") or {}
    if kept.get("given"):
        console.print(
            f"constraints ({kept['file']} constraints.txt): {', '.join(kept['given'])}",
            markup=False,
            highlight=False,
        )
    for line in doc.get("rules") or []:
        console.print(f"review preflight {line}", markup=False, highlight=False)
    for i, one in enumerate(doc["locks"]):
        last = i == len(doc["locks"]) - 1
        part = {**one, "stack": doc["stack"], "recipe": doc.get("recipe")}
        console.print(f"changes: {change_line(one['changes'])}", markup=False, highlight=False)
        if last:
            stack_out.draft_report(console, part)
        else:
            console.print(
                f"wrote {one['lock']}: {one['packages']} distributions ({one['compiled']} compiled)",
                markup=False,
                highlight=False,
            )


def convert_command(c: Any, **f: Any) -> None:
    """Convert the earlier-format lock at --path to PEP 751 (beside ``locks/``, or --out)."""

    if not f.get("path"):
        raise RecipeError("--path is required (an earlier-format lock, locks/<name>.toml)")
    src = Path(f["path"])
    out = convert_lock(src, Path(f["out"]) if f.get("out") else None)
    doc = {"converted": str(src), "lock": str(out)}
    show_document(doc, bool(f.get("json")), _converted)


def _converted(console: Any, doc: dict[str, Any]) -> None:
    console.print(f"wrote {doc['lock']} from {doc['converted']}", markup=False)

"""Patches for package sources: read `patches/<package>/*.patch`, pick those for a version, and
check/apply them on a host with the stdlib-only `remote/patch_tree.py`.

A patch file is a unified diff (paths ``a/...``/``b/...`` relative to the package's source
root) preceded by a header of ``# Key: value`` lines::

    # Applies-To: >=0.3.17,<=0.3.21
    # Applies-To-Torch: >=2.14     (optional: only with a torch the specifier admits)
    # Fixes: what is wrong without it, one line
    # Option: NAME: what the CMake option it adds does (optional; --explain's reason)
    # Upstream: owner/repo@commit path (what the context lines were checked against)
    # Strip: 1

``Applies-To`` is a PEP 440 specifier set; the recipe declares its own specifier for each patch
too, and a patch is used only when the version satisfies both. ``Applies-To-Torch`` gates a
patch on the recipe's torch version (a fix that only a newer torch's headers need stays out of
builds against an older torch, and out of their wheel-cache keys). Before the tree is touched
every patch is classified "applies", "already applied" or "does not apply"; one that does
not apply stops the build with the rejected hunk, tree unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import PatchError, RecipeError
from ..steps import Step

if TYPE_CHECKING:
    from ..runner.host_context import HostContext

APPLIES = "applies"
ALREADY_APPLIED = "already applied"
DOES_NOT_APPLY = "does not apply"

_HEADER = re.compile(r"^#\s*([A-Za-z][A-Za-z0-9-]*)\s*:\s*(.*?)\s*$")
_FILE = re.compile(r"^\+\+\+ (?:[^/\s]+/)?(\S+)")
#: An added CMake line that declares a cache variable: ``set(X ... CACHE ...)`` or ``option(X``.
_CMAKE_OPTION = re.compile(
    r"^\+\s*(?:set\(\s*([A-Za-z_][A-Za-z0-9_]*)\s.*\bCACHE\b|option\(\s*([A-Za-z_][A-Za-z0-9_]*))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Patch:
    """One patch file: its diff text and the header fields above the diff."""

    name: str
    path: Path
    text: str
    header: dict[str, str] = field(default_factory=dict)
    applies_to: SpecifierSet | None = None
    torch: SpecifierSet | None = None
    strip: int = 1

    @property
    def files(self) -> list[str]:
        """Files the diff touches (relative to the source root)."""
        found = [m[1] for line in self.text.splitlines() if (m := _FILE.match(line))]
        return [f for f in found if f != "/dev/null"]

    @property
    def fixes(self) -> str:
        return self.header.get("Fixes", "")

    @property
    def options_added(self) -> frozenset[str]:
        """CMake cache variables the diff's added lines declare (``set(X "" CACHE ...)``,
        ``option(X ...)``): a build option that exists only in a tree with this patch."""
        found: set[str] = set()
        for line in self.text.splitlines():
            if line.startswith("+++"):
                continue
            m = _CMAKE_OPTION.match(line)
            if m:
                found.add(m[1] or m[2])
        return frozenset(found)

    @property
    def option_docs(self) -> dict[str, str]:
        """What each added option does, from the header line ``# Option: NAME: what it does``
        (one per patch); an added option without that line maps to ""."""
        docs = dict.fromkeys(self.options_added, "")
        name, _, doc = self.header.get("Option", "").partition(":")
        if name.strip() in docs:
            docs[name.strip()] = doc.strip()
        return docs


def parse_header(text: str) -> dict[str, str]:
    """The ``# Key: value`` lines before the diff starts.

    A line ``#`` followed by two or more spaces continues the previous key's value; any
    other comment line ends it.
    """
    header: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        if line.startswith(("--- ", "diff ", "@@")):
            break
        match = _HEADER.match(line)
        if match:
            last = match[1]
            header[last] = match[2]
        elif last is not None and line.startswith("#  ") and line[1:].strip():
            header[last] += " " + line[1:].strip()
        else:
            last = None
    return header


def load_patch(path: str | Path) -> Patch:
    """Read one patch file; a malformed header raises a one-line RecipeError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read patch ({exc.strerror})") from None
    header = parse_header(text)
    if "--- " not in text or "@@" not in text:
        raise RecipeError(f"{path}: not a unified diff (no '---' / '@@' lines)")
    spec = None
    if "Applies-To" in header:
        spec = _specifier(header["Applies-To"], f"{path}: Applies-To")
    torch = None
    if "Applies-To-Torch" in header:
        torch = _specifier(header["Applies-To-Torch"], f"{path}: Applies-To-Torch")
    strip = header.get("Strip", "1")
    if not strip.isdigit():
        raise RecipeError(f"{path}: Strip: '{strip}' is not a number")
    return Patch(
        name=path.name,
        path=path,
        text=text,
        header=header,
        applies_to=spec,
        torch=torch,
        strip=int(strip),
    )


def load_patches(directory: str | Path, names: list[str] | None = None) -> list[Patch]:
    """Patches of one package directory, in file-name order (or in the order of `names`)."""
    directory = Path(directory)
    if names is None:
        return [load_patch(p) for p in sorted(directory.glob("*.patch"))]
    patches = []
    for name in names:
        path = directory / name
        if not path.is_file():
            raise RecipeError(f"patch '{name}' not found in {directory}")
        patches.append(load_patch(path))
    return patches


def _specifier(text: str, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise RecipeError(f"{where}: '{text}' is not a version specifier") from None


def applicable(patch: Patch, version: str, recipe_spec: str | None = None) -> bool:
    """Whether `patch` is for package `version`: its ``Applies-To`` header and the recipe's
    specifier (when given) must both admit it. Pre-releases and local versions count."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise RecipeError(f"patch {patch.name}: '{version}' is not a version") from None
    specs = [s for s in (patch.applies_to,) if s is not None]
    if recipe_spec:
        specs.append(_specifier(recipe_spec, f"recipe entry for patch {patch.name}"))
    return all(spec.contains(parsed, prereleases=True) for spec in specs)


def select(
    patches: list[Patch],
    version: str,
    recipe_specs: dict[str, str] | None = None,
    *,
    torch: str | None = None,
) -> tuple[list[Patch], list[tuple[Patch, str]]]:
    """Split `patches` into those for package `version` (and, for patches with an
    ``Applies-To-Torch`` header, for `torch`) and the skipped ones with the reason."""
    recipe_specs = recipe_specs or {}
    chosen: list[Patch] = []
    skipped: list[tuple[Patch, str]] = []
    for patch in patches:
        spec = recipe_specs.get(patch.name)
        if not applicable(patch, version, spec):
            wanted = " and ".join(s for s in (str(patch.applies_to or ""), spec or "") if s)
            skipped.append((patch, f"version {version} is outside {wanted}"))
        elif patch.torch is not None and not torch_admitted(patch, torch):
            skipped.append((patch, f"torch {torch} is outside Applies-To-Torch {patch.torch}"))
        else:
            chosen.append(patch)
    return chosen, skipped


def for_package(
    patches_dir: Path, names: Iterable[str], version: str, torch: str | None
) -> tuple[list[Patch], list[tuple[Patch, str]]]:
    """The recipe entry's patches (`names`, under `patches_dir`) split by `select` for the
    package `version` and the recipe's `torch`."""
    return select([load_patch(patches_dir / n) for n in names], version, torch=torch)


def torch_admitted(patch: Patch, torch: str | None) -> bool:
    """Whether `patch`'s ``Applies-To-Torch`` admits torch `torch` (a local version such as
    ``2.14.1+cu130`` counts as its release). No header admits any torch; a header with the
    torch unknown admits none, so a gated fix never lands by accident."""
    if patch.torch is None:
        return True
    if not torch:
        return False
    try:
        parsed = Version(torch)
    except InvalidVersion:
        raise RecipeError(f"patch {patch.name}: torch '{torch}' is not a version") from None
    return patch.torch.contains(parsed.public if parsed.local else parsed, prereleases=True)


@dataclass
class PatchReport:
    """What `patch_tree` found (and did) for each patch."""

    tree: str
    applied: bool
    states: list[dict[str, Any]]

    def state(self, name: str) -> str:
        for entry in self.states:
            if entry["name"] == name:
                return str(entry["state"])
        raise KeyError(name)


def patch_args(tree: str, patches: list[Patch], apply: bool) -> dict[str, Any]:
    """Arguments for the remote `patch_tree` script."""
    return {
        "tree": tree,
        "apply": apply,
        "patches": [{"name": p.name, "text": p.text, "strip": p.strip} for p in patches],
    }


def patch_step(tree: str, patches: list[Patch]) -> Step:
    """The step that applies `patches` to the host's `tree` (all of them, or none)."""
    return Step("patch", tree=tree, patches=patch_args(tree, patches, True)["patches"])


def run_patch_steps(
    ctx: HostContext, steps: list[Step], cleanup: list[str], *, python: str | None = None
) -> PatchReport:
    """Run steps holding a ``patch`` step on the host (remote/patch_tree.py's interpreter).

    Raises PatchError naming the rejected hunk when a patch does not apply; the `cleanup`
    paths are removed then, and the tree the patches were for is unchanged.
    """
    [patch] = [s for s in steps if s["op"] == "patch"]
    result = ctx.script("patch_tree", {"steps": steps, "cleanup": cleanup}, python=python)
    states = list(result.get("patches") or [])
    for entry in states:
        if entry["state"] == DOES_NOT_APPLY:
            raise PatchError(rejection_message(ctx.host.name, patch["tree"], entry))
    if not result.get("ok"):
        raise PatchError(f"{ctx.host.name}: patching {patch['tree']} failed: {result['error']}")
    return PatchReport(tree=str(patch["tree"]), applied=bool(result.get("applied")), states=states)


def check_and_apply(
    ctx: HostContext,
    tree: str,
    patches: list[Patch],
    *,
    apply: bool = True,
    python: str | None = None,
) -> PatchReport:
    """Classify every patch against the host's `tree` and, if all can be used, apply them.

    Raises PatchError (one line, then the rejected hunk) when a patch does not apply; the
    tree is unchanged then.
    """
    result = ctx.script("patch_tree", patch_args(tree, patches, apply), python=python)
    if result.get("error"):
        raise PatchError(f"{ctx.host.name}: patching {tree} failed: {result['error']}")
    states = list(result.get("patches") or [])
    for entry in states:
        if entry["state"] == DOES_NOT_APPLY:
            raise PatchError(rejection_message(ctx.host.name, tree, entry))
    return PatchReport(
        tree=str(result.get("tree", tree)), applied=bool(result.get("applied")), states=states
    )


def rejection_message(host: str, tree: str, entry: dict[str, Any]) -> str:
    """The error for a patch that does not apply: a one-line summary, then the hunk."""
    rejected = entry.get("rejected") or {}
    where = rejected.get("file") or "?"
    lines = [
        f"patch {entry['name']} does not apply to {where} in {tree} on {host}: "
        f"{rejected.get('reason', 'rejected')} (tree left unchanged)"
    ]
    if rejected.get("hunk"):
        lines += ["rejected hunk:", rejected["hunk"]]
    if rejected.get("found"):
        lines += ["the file has there:", rejected["found"].rstrip("\n")]
    return "\n".join(lines)

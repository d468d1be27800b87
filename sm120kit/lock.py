"""Locks: the exact files a serving stack installs, and the recipe's ``[stack]`` table.

A lock (``locks/<top>-<version>-<python tag>-<platform>.toml``) lists every distribution of
one top-level requirement's dependency closure for one Python and platform: name, version,
the wheel's filename, URL and sha256 (and size when known), and whether the host gets the
released wheel (``from = "release"``) or a build from the recipe's pinned source
(``from = "build"``). It is drafted by `sm120kit.lock_draft` (``invoke lock.draft``) from
pip's own resolver, never written by hand, and a host installs it with ``--no-deps`` and
the lock's hashes: pip never resolves on a host. Format::

    [lock]
    top = "sglang==0.5.23"              # the requirement it was resolved from
    python = "3.11"                     # X.Y it was resolved for
    platform = "manylinux_2_34_x86_64"  # the newest platform tag it accepts
    torch = "2.14.1"                    # the closure's torch, if any (builds are built on it)
    torch_cuda = "13.0"                 # that torch build's CUDA X.Y (from its Requires-Dist)
    resolver = "pip 23.2.1 install --dry-run --ignore-installed --report"
    drafted = "2026-12-02"
    target = { driver = "580.65.06", arch = "12.0" }   # what the verdicts below were for

    [[package]]
    name = "sglang-kernel"; version = "0.4.10"
    filename = "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl"
    url = "https://files.pythonhosted.org/..."; sha256 = "043c..."; size = 373008902
    from = "release"                    # or "build"
    compiled = true                     # the wheel holds shared objects (.so)
    verdict = "ok"                      # the draft's verification for `target` (review it)
    notes = ["..."]

The recipe's ``[stack]`` table names the lock (`StackSpec`)::

    [stack]
    top = "sglang==0.5.23"              # must equal the lock's [lock].top
    lock = "locks/sglang-0.5.23-cp311-manylinux_2_34_x86_64.toml"   # relative to the repo
    reason = "one line plan shows"
    build = []                          # lock distributions built from the recipe's source
    not_for_arch = { flash_ops = "why" }   # modules reported, not judged, by verification
    loaders = { name = { "9.0" = "sm90", "*" = "sm100" } }   # a loader's per-arch dirs

Loading checks every key and value and raises one `RecipeError` naming the file, the line
and the key.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .errors import RecipeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

FROM = ("release", "build")
_LOCK_REQUIRED = {"top", "python", "platform", "resolver", "drafted"}
_LOCK_OPTIONAL = {"torch", "torch_cuda", "target", "indexes"}
_PKG_REQUIRED = {"name", "version", "filename", "url", "sha256", "from", "compiled"}
_PKG_OPTIONAL = {"size", "verdict", "notes"}
_STACK_REQUIRED = {"top", "lock", "reason"}
_STACK_OPTIONAL = {"build", "not_for_arch", "loaders"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$")


@dataclass(frozen=True)
class LockEntry:
    """One distribution of a lock."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    source: str  # "release" | "build" (the file's ``from``)
    compiled: bool
    size: int | None = None
    verdict: str = ""
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The canonical distribution name (``foo_bar`` and ``Foo-Bar`` are one)."""
        return str(canonicalize_name(self.name))

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "filename": self.filename,
            "url": self.url,
            "sha256": self.sha256,
            "from": self.source,
            "compiled": self.compiled,
        }
        if self.size is not None:
            doc["size"] = self.size
        if self.verdict:
            doc["verdict"] = self.verdict
        if self.notes:
            doc["notes"] = list(self.notes)
        return doc


@dataclass(frozen=True)
class Lock:
    """A loaded lock file."""

    path: Path
    top: str
    python: str
    platform: str
    torch: str
    torch_cuda: str
    resolver: str
    drafted: str
    packages: tuple[LockEntry, ...]
    target: dict[str, str] = field(default_factory=dict)
    indexes: tuple[str, ...] = ()

    @property
    def top_name(self) -> str:
        return str(canonicalize_name(Requirement(self.top).name))

    def entry(self, name: str) -> LockEntry | None:
        """The entry for distribution `name` (any spelling), or None."""
        key = str(canonicalize_name(name))
        return next((p for p in self.packages if p.key == key), None)


@dataclass(frozen=True)
class StackSpec:
    """A recipe's ``[stack]`` table."""

    top: str
    lock: str
    reason: str
    build: tuple[str, ...] = ()
    not_for_arch: dict[str, str] = field(default_factory=dict)
    #: Distribution -> its loader's per-arch directories (capability or "*" -> directory).
    loaders: dict[str, dict[str, str]] = field(default_factory=dict)


class LockFileError(RecipeError):
    """A lock file that cannot be used; the message names file, line and key."""


def _line_of(text: str, needle: str, after: int = 0) -> int | None:
    """The first line at or after line `after` (1-based) that assigns key `needle`."""
    pattern = re.compile(rf"^\s*{re.escape(needle)}\s*=")
    for no, line in enumerate(text.splitlines(), 1):
        if no >= after and pattern.match(line):
            return no
    return None


def _package_lines(text: str) -> list[int]:
    return [no for no, line in enumerate(text.splitlines(), 1) if line.strip() == "[[package]]"]


class _Where:
    """Turns a key of one file into ``file:line: key: problem``."""

    def __init__(self, where: str, text: str) -> None:
        self.where, self.text = where, text
        self.starts = _package_lines(text)

    def error(self, key: str, problem: str, index: int | None = None) -> LockFileError:
        start = self.starts[index] if index is not None and index < len(self.starts) else 0
        leaf = key.rsplit(".", 1)[-1]
        line = _line_of(self.text, leaf, start) or (start or None)
        loc = f"{self.where}:{line}" if line else self.where
        return LockFileError(f"{loc}: {key}: {problem}")


def _keys(
    w: _Where, table: Any, prefix: str, required: set[str], optional: set[str], i: int | None = None
) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise w.error(prefix, f"expected a table, got {type(table).__name__}", i)
    for key in table:
        if key not in required | optional:
            allowed = ", ".join(sorted(required | optional))
            raise w.error(f"{prefix}.{key}", f"unknown key; allowed: {allowed}", i)
    for key in sorted(required):
        if key not in table:
            raise w.error(prefix, f"missing required key {key!r}", i)
    return table


def _text(w: _Where, table: dict[str, Any], prefix: str, key: str, i: int | None = None) -> str:
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise w.error(f"{prefix}.{key}", f"expected a non-empty string, got {value!r}", i)
    return value


def _requirement(w: _Where, value: str, key: str) -> str:
    try:
        req = Requirement(value)
    except InvalidRequirement:
        raise w.error(key, f"{value!r} is not a requirement like 'sglang==0.5.23'") from None
    pins = [s for s in req.specifier if s.operator == "=="]
    if len(pins) != 1 or len(req.specifier) != 1 or req.marker or req.extras:
        raise w.error(key, f"{value!r} must pin one version exactly (name==version)")
    return value


def parse_lock(path: Path, text: str, where: str | None = None) -> Lock:
    """Validate lock `text` (read from `path`) into a `Lock`; LockFileError on any problem."""
    w = _Where(where or str(path), text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockFileError(f"{w.where}: invalid TOML: {exc}") from None
    _keys(w, data, "", {"lock", "package"}, set())
    head = _keys(w, data["lock"], "lock", _LOCK_REQUIRED, _LOCK_OPTIONAL)
    vals = {k: _text(w, head, "lock", k) for k in _LOCK_REQUIRED}
    vals["torch"] = _text(w, head, "lock", "torch") if "torch" in head else ""
    vals["torch_cuda"] = _text(w, head, "lock", "torch_cuda") if "torch_cuda" in head else "cpu"
    _requirement(w, vals["top"], "lock.top")
    if not re.fullmatch(r"3\.\d+", vals["python"]):
        raise w.error("lock.python", f"expected X.Y like '3.11', got {vals['python']!r}")
    try:
        if vals["torch"]:
            Version(vals["torch"])
    except InvalidVersion:
        raise w.error("lock.torch", f"not a version: {vals['torch']!r}") from None
    if vals["torch_cuda"] != "cpu" and not re.fullmatch(r"\d+\.\d+", vals["torch_cuda"]):
        raise w.error("lock.torch_cuda", f"expected 'X.Y' or 'cpu', got {vals['torch_cuda']!r}")
    target = head.get("target", {})
    if not isinstance(target, dict) or not all(
        k in ("driver", "arch") and isinstance(v, str) for k, v in target.items()
    ):
        raise w.error("lock.target", 'expected { driver = "580.65.06", arch = "12.0" }')
    indexes = head.get("indexes", [])
    if not isinstance(indexes, list) or not all(isinstance(x, str) for x in indexes):
        raise w.error("lock.indexes", "expected a list of index URLs")
    raw = data["package"]
    if not isinstance(raw, list) or not raw:
        raise w.error("package", "expected a non-empty array of tables ([[package]])")
    entries = [_entry(w, item, i) for i, item in enumerate(raw)]
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.key in seen:
            raise w.error("package.name", f"{entry.name} is listed twice", i)
        seen[entry.key] = i
    lock = Lock(
        path=path,
        top=vals["top"],
        python=vals["python"],
        platform=vals["platform"],
        torch=vals["torch"],
        torch_cuda=vals["torch_cuda"],
        resolver=vals["resolver"],
        drafted=vals["drafted"],
        packages=tuple(entries),
        target=dict(target),
        indexes=tuple(indexes),
    )
    top = Requirement(lock.top)
    top_entry = lock.entry(top.name)
    if top_entry is None or not top.specifier.contains(top_entry.version, prereleases=True):
        raise w.error("lock.top", f"{lock.top} is not among the lock's packages")
    torch = lock.entry("torch")
    if (torch is None) != (not lock.torch) or (
        torch is not None and Version(torch.version).public != Version(lock.torch).public
    ):
        have = torch.version if torch is not None else "none"
        raise w.error("lock.torch", f"{lock.torch or 'none'} differs from the torch entry's {have}")
    return lock


def _entry(w: _Where, item: Any, i: int) -> LockEntry:
    prefix = f"package[{i}]"
    table = _keys(w, item, prefix, _PKG_REQUIRED, _PKG_OPTIONAL, i)
    name = _text(w, table, prefix, "name", i)
    version = _text(w, table, prefix, "version", i)
    try:
        Version(version)
    except InvalidVersion:
        raise w.error(f"{prefix}.version", f"not a version: {version!r}", i) from None
    filename = _text(w, table, prefix, "filename", i)
    if "/" in filename or not filename.endswith(".whl"):
        raise w.error(f"{prefix}.filename", f"{filename!r} is not a wheel file name", i)
    url = _text(w, table, prefix, "url", i)
    if "://" not in url:
        raise w.error(f"{prefix}.url", f"expected a URL, got {url!r}", i)
    sha = _text(w, table, prefix, "sha256", i)
    if not _SHA256.match(sha):
        raise w.error(f"{prefix}.sha256", "expected 64 lower-case hex digits", i)
    source = table["from"]
    if source not in FROM:
        raise w.error(f"{prefix}.from", f"{source!r} is not one of {', '.join(FROM)}", i)
    compiled = table["compiled"]
    if not isinstance(compiled, bool):
        raise w.error(f"{prefix}.compiled", f"expected true or false, got {compiled!r}", i)
    size = table.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise w.error(f"{prefix}.size", f"expected a byte count, got {size!r}", i)
    verdict = table.get("verdict", "")
    notes = table.get("notes", [])
    if not isinstance(verdict, str):
        raise w.error(f"{prefix}.verdict", "expected a string", i)
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise w.error(f"{prefix}.notes", "expected a list of strings", i)
    return LockEntry(
        name=name,
        version=version,
        filename=filename,
        url=url,
        sha256=sha,
        source=source,
        compiled=compiled,
        size=size,
        verdict=verdict,
        notes=tuple(notes),
    )


def load_lock(path: Path, where: str | None = None) -> Lock:
    """Read and validate the lock at `path`; LockFileError naming the file when it is unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LockFileError(f"{where or path}: cannot read the lock: {exc.strerror}") from None
    return parse_lock(path, text, where)


def parse_stack(table: Any, error: Any) -> StackSpec:
    """A recipe's ``[stack]`` table; `error(keypath, problem)` makes the recipe's located error."""
    if not isinstance(table, dict):
        raise error(("stack",), "expected a table")
    for key in table:
        if key not in _STACK_REQUIRED | _STACK_OPTIONAL:
            allowed = ", ".join(sorted(_STACK_REQUIRED | _STACK_OPTIONAL))
            raise error(("stack", key), f"unknown key; allowed: {allowed}")
    for key in sorted(_STACK_REQUIRED):
        if key not in table:
            raise error(("stack",), f"missing required key {key!r}")
    for key in _STACK_REQUIRED:
        if not isinstance(table[key], str) or not table[key].strip():
            raise error(("stack", key), f"expected a non-empty string, got {table[key]!r}")
    w = _Where("", "")
    try:
        _requirement(w, table["top"], "stack.top")
    except LockFileError as exc:
        raise error(("stack", "top"), str(exc).split(": ", 2)[-1]) from None
    lock = table["lock"]
    if lock.startswith("/") or ".." in Path(lock).parts or not lock.endswith(".toml"):
        raise error(("stack", "lock"), f"{lock!r} must be a .toml path relative to the repo")
    build = table.get("build", [])
    if not isinstance(build, list) or not all(isinstance(b, str) and b for b in build):
        raise error(("stack", "build"), "expected a list of distribution names")
    nfa = table.get("not_for_arch", {})
    if not isinstance(nfa, dict):
        raise error(("stack", "not_for_arch"), 'expected a table like { flash_ops = "why" }')
    for module, why in nfa.items():
        if not _MODULE.match(module):
            raise error(
                ("stack", "not_for_arch", module),
                "not a module stem or a path in a wheel without its suffix (torchao/_C)",
            )
        if not isinstance(why, str) or not why.strip():
            raise error(("stack", "not_for_arch", module), "expected the reason as a string")
    loaders = table.get("loaders", {})
    if not isinstance(loaders, dict):
        raise error(("stack", "loaders"), 'expected a table like { name = { "9.0" = "sm90" } }')
    for dist, dirs in loaders.items():
        if (
            not isinstance(dirs, dict)
            or not dirs
            or not all(
                (k == "*" or re.fullmatch(r"\d+\.\d+", k))
                and isinstance(v, str)
                and re.fullmatch(r"sm\d+", v)
                for k, v in dirs.items()
            )
        ):
            raise error(
                ("stack", "loaders", dist),
                'expected { "9.0" = "sm90", "*" = "sm100" }: capability (or "*") -> smNN directory',
            )
    return StackSpec(
        top=table["top"],
        lock=lock,
        reason=table["reason"],
        build=tuple(build),
        not_for_arch=dict(nfa),
        loaders={str(canonicalize_name(k)): dict(v) for k, v in loaders.items()},
    )


def check_stack_lock(stack: StackSpec, repo: Path, torch_specs: dict[str, Any], error: Any) -> Lock:
    """Load the lock a recipe's stack names and check it against the recipe: the same top,
    every ``build`` name in the lock, and each recipe package of a locked name and version
    (a build candidate) admitting the lock's torch (it is built against that torch).
    `torch_specs` maps ``name==version`` of the recipe's packages to their torch specifier."""
    path = repo / stack.lock
    if not path.exists() and (CHECKOUT / stack.lock).exists():
        path = CHECKOUT / stack.lock  # recipes copied elsewhere (tests) use the shipped locks
    lock = load_lock(path, stack.lock)
    if Requirement(lock.top).name != Requirement(stack.top).name or lock.top != stack.top:
        raise error(("stack", "top"), f"{stack.top!r} differs from {stack.lock}'s {lock.top!r}")
    for name in stack.build:
        if lock.entry(name) is None:
            raise error(("stack", "build"), f"{name} is not a distribution of {stack.lock}")
    for entry in lock.packages:
        spec = torch_specs.get(f"{entry.key}=={entry.version}")
        if spec is not None and not spec.contains(lock.torch, prereleases=True):
            raise error(
                ("stack", "lock"),
                f"the recipe's {entry.name} {entry.version} entry wants torch '{spec}', but "
                f"{stack.lock} locks torch {lock.torch}: a build must use the lock's torch",
            )
    return lock


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def dump_lock(lock: Lock, header: list[str]) -> str:
    """The lock as TOML text (packages sorted by name), `header` lines as leading comments."""
    lines = [f"# {h}" if h else "#" for h in header]
    lines.append("[lock]")
    fields: dict[str, Any] = {"top": lock.top, "python": lock.python, "platform": lock.platform}
    if lock.torch:
        fields.update(torch=lock.torch, torch_cuda=lock.torch_cuda)
    fields.update(resolver=lock.resolver, drafted=lock.drafted)
    if lock.target:
        fields["target"] = dict(lock.target)
    if lock.indexes:
        fields["indexes"] = list(lock.indexes)
    lines += [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    for entry in sorted(lock.packages, key=lambda e: e.key):
        lines += ["", "[[package]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in entry.to_dict().items()]
    return "\n".join(lines) + "\n"


#: This checkout's root, where the shipped ``locks/`` live.
CHECKOUT = Path(__file__).resolve().parent.parent


def locks_root(base: Path) -> Path:
    """Where a recipe's ``stack.lock`` paths start: `base` (the directory above ``recipes/``);
    a lock not found there is looked up in this checkout (`check_stack_lock`)."""
    return base

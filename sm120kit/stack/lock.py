"""Locks: the exact files a serving stack installs, and the recipe's ``[stack]`` table.

A lock is a standard PEP 751 ``pylock.toml`` file, one per (top release, Python X.Y,
platform), in one directory per top release::

    locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml
    locks/sglang-0.5.23/pylock.cp312-manylinux_2_34_x86_64.toml

It lists every distribution of the top requirement's dependency closure for that Python and
platform with exactly one wheel each (URL, sha256, size), so ``uv pip install -r`` or
``pip install -r`` (pip 26.1 and newer) installs it without this tool. What is ours lives in
``[tool.sm120kit]`` tables, which PEP 751 reserves for tools (docs/locks.md)::

    lock-version = "1.0"
    requires-python = "==3.11.*"
    created-by = "sm120kit"

    [tool.sm120kit]
    top = "sglang==0.5.23"              # the requirement it was resolved from
    python = "3.11"                     # X.Y it was resolved for
    platform = "manylinux_2_34_x86_64"  # the newest platform tag it accepts
    torch = "2.14.1"                    # the closure's torch, if any (builds are built on it)
    torch_cuda = "13.0"                 # that torch build's CUDA X.Y (from its Requires-Dist)
    resolver = "uv 0.13.9 pip compile ..."
    drafted = "2026-12-02"
    target = { driver = "580.65.06", arch = "12.0" }   # what the verdicts below were for
    indexes = ["https://files.pythonhosted.org"]

    [[packages]]
    name = "sglang-kernel"
    version = "0.4.10"
    wheels = [{ name = "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl",
                url = "https://files.pythonhosted.org/...", size = 373008902,
                hashes = { sha256 = "043c..." } }]

    [packages.tool.sm120kit]
    from = "release"                    # or "build" (from the recipe's pinned source)
    compiled = true                     # the wheel holds shared objects (.so)
    verdict = "ok"                      # the draft's verification for `target` (review it)
    notes = ["..."]

Locks are drafted by `sm120kit.stack.draft` (``invoke lock.draft``), never written by hand; a
host installs the lock's files with their hashes, nothing resolves on a host. A lock in the
project's earlier format (``[lock]`` and ``[[package]]``) is refused with one line saying how
to convert it (``invoke lock.convert``, `sm120kit.stack.convert`).

The recipe's ``[stack]`` table names the directory (`StackSpec`)::

    [stack]
    top = "sglang==0.5.23"              # must equal each lock's top
    locks = "locks/sglang-0.5.23"       # relative to the repo: one pylock per Python
    reason = "one line plan shows"
    build = []                          # lock distributions built from the recipe's source
    indexes = []                        # extra indexes lock.draft may take wheels from
    not_for_arch = { flash_ops = "why" }   # modules reported, not judged, by verification
    loaders = { name = { "9.0" = "sm90", "*" = "sm100" } }   # a loader's per-arch dirs

`Recipe.lock` is the lock for the recipe's first Python that has one; `stack_locks` gives
every Python's, `lock_for` one Python's. Loading checks every key and value and raises one
`RecipeError` naming the file, the line and the key.
"""

from __future__ import annotations

import re
import sys
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .. import engines
from ..errors import RecipeError
from ..remote.lib.download import shown
from ..remote.lib.obtain import url_problem
from .catalogue import FILE_NAME, load_beside
from .constraints import parse_constraint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

FROM = ("release", "build")
_LOCK_REQUIRED = {"top", "python", "platform", "resolver", "drafted"}
_LOCK_OPTIONAL = {"torch", "torch_cuda", "target", "indexes", "constraints"}
_TOP_REQUIRED = {"lock-version", "created-by", "requires-python", "packages"}
_TOP_OPTIONAL = {"environments", "extras", "dependency-groups", "default-groups", "tool"}
_PKG_REQUIRED = {"name", "version", "wheels"}
#: PEP 751 package keys a wheel-only lock may carry; vcs/directory/archive/sdist sources are not.
_PKG_OPTIONAL = {"marker", "requires-python", "dependencies", "index", "tool", "upload-time"}
_OURS_REQUIRED = {"from", "compiled"}
_OURS_OPTIONAL = {"verdict", "notes"}
_WHEEL_KEYS = {"name", "url", "size", "hashes", "upload-time", "path"}
_STACK_REQUIRED = {"top", "locks", "reason"}
_STACK_OPTIONAL = {"build", "not_for_arch", "loaders", "indexes", "engines"}
#: ``pylock.cp311-manylinux_2_34_x86_64.toml`` (PEP 751 names: ``pylock.<name>.toml``).
LOCK_FILE = re.compile(r"^pylock\.cp3(\d+)-([A-Za-z0-9_]+)\.toml$")
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
        """The entry as a flat document (JSON output, reports)."""
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
    #: The resolver's constraints beyond the closure's metadata (`stack.constraints`).
    constraints: tuple[str, ...] = ()

    @property
    def top_name(self) -> str:
        return str(canonicalize_name(Requirement(self.top).name))

    @property
    def label(self) -> str:
        """``sglang-0.5.23-cp311-manylinux_2_34_x86_64``: one name per (top, Python, platform),
        for anything named after the lock (an env directory), since every lock file of a
        directory shares the ``pylock.`` prefix."""
        version = Requirement(self.top).specifier
        pin = next(iter(version)).version if len(version) == 1 else "any"
        return f"{self.top_name}-{pin}-cp{self.python.replace('.', '')}-{self.platform}"

    def entry(self, name: str) -> LockEntry | None:
        """The entry for distribution `name` (any spelling), or None."""
        key = str(canonicalize_name(name))
        return next((p for p in self.packages if p.key == key), None)


@dataclass(frozen=True)
class StackSpec:
    """A recipe's ``[stack]`` table."""

    top: str
    locks: str
    reason: str
    build: tuple[str, ...] = ()
    not_for_arch: dict[str, str] = field(default_factory=dict)
    #: Distribution -> its loader's per-arch directories (capability or "*" -> directory).
    loaders: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Extra package indexes `lock.draft` may take wheels from (a wheel-stub's real index).
    indexes: tuple[str, ...] = ()
    #: The chosen lock file (the recipe's preferred Python), relative to the repo; set on load.
    lock: str = ""
    #: Engine name -> the shared stack line a host choosing it gets (``stack: vllm``):
    #: the engines this stack's recipes offer besides their own (`sm120kit.engines`).
    engines: dict[str, str] = field(default_factory=dict)


class LockFileError(RecipeError):
    """A lock file that cannot be used; the message names file, line and key."""


def lock_file_name(python: str, platform: str) -> str:
    """``pylock.cp311-manylinux_2_34_x86_64.toml`` for Python 3.11 on that platform."""
    return f"pylock.cp{python.replace('.', '')}-{platform}.toml"


def lock_dir_name(top: str) -> str:
    """``sglang-0.5.23`` for ``sglang==0.5.23``: the directory of one release's locks."""
    req = Requirement(top)
    pin = next(iter(req.specifier)).version
    return f"{canonicalize_name(req.name)}-{pin}"


def _line_of(text: str, needle: str, after: int = 0) -> int | None:
    """The first line at or after line `after` (1-based) that assigns key `needle`."""
    pattern = re.compile(rf"^\s*{re.escape(needle)}\s*=")
    for no, line in enumerate(text.splitlines(), 1):
        if no >= after and pattern.match(line):
            return no
    return None


class _Where:
    """Turns a key of one file into ``file:line: key: problem``."""

    def __init__(self, where: str, text: str, marker: str = "[[packages]]") -> None:
        self.where, self.text = where, text
        self.starts = [n for n, ln in enumerate(text.splitlines(), 1) if ln.strip() == marker]

    def error(self, key: str, problem: str, index: int | None = None) -> LockFileError:
        start = self.starts[index] if index is not None and index < len(self.starts) else 0
        # The innermost key assigned on a line of its own (inline tables: their key's line).
        line = None
        for part in reversed(key.split(".")):
            line = _line_of(self.text, re.sub(r"\[\d+\]$", "", part), start)
            if line:
                break
        line = line or (start or None)
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
            raise w.error(f"{prefix}.{key}".lstrip("."), f"unknown key; allowed: {allowed}", i)
    for key in sorted(required):
        if key not in table:
            raise w.error(prefix or key, f"missing required key {key!r}", i)
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


def is_old_format(data: dict[str, Any]) -> bool:
    """Whether a parsed TOML document is a lock in the project's earlier format."""
    return isinstance(data.get("lock"), dict) and "package" in data and "packages" not in data


def _head(w: _Where, data: dict[str, Any]) -> dict[str, Any]:
    """The ``[tool.sm120kit]`` table's values, checked."""
    tool = data.get("tool")
    if not isinstance(tool, dict) or "sm120kit" not in tool:
        raise w.error(
            "tool.sm120kit", "missing: not a lock drafted by sm120kit (invoke lock.draft)"
        )
    head = _keys(w, tool["sm120kit"], "tool.sm120kit", _LOCK_REQUIRED, _LOCK_OPTIONAL)
    p = "tool.sm120kit"
    vals: dict[str, Any] = {k: _text(w, head, p, k) for k in _LOCK_REQUIRED}
    vals["torch"] = _text(w, head, p, "torch") if "torch" in head else ""
    vals["torch_cuda"] = _text(w, head, p, "torch_cuda") if "torch_cuda" in head else "cpu"
    _requirement(w, vals["top"], f"{p}.top")
    if not re.fullmatch(r"3\.\d+", vals["python"]):
        raise w.error(f"{p}.python", f"expected X.Y like '3.11', got {vals['python']!r}")
    try:
        if vals["torch"]:
            Version(vals["torch"])
    except InvalidVersion:
        raise w.error(f"{p}.torch", f"not a version: {vals['torch']!r}") from None
    if vals["torch_cuda"] != "cpu" and not re.fullmatch(r"\d+\.\d+", vals["torch_cuda"]):
        raise w.error(f"{p}.torch_cuda", f"expected 'X.Y' or 'cpu', got {vals['torch_cuda']!r}")
    target = head.get("target", {})
    if not isinstance(target, dict) or not all(
        k in ("driver", "arch") and isinstance(v, str) for k, v in target.items()
    ):
        raise w.error(f"{p}.target", 'expected { driver = "580.65.06", arch = "12.0" }')
    indexes = head.get("indexes", [])
    if not isinstance(indexes, list) or not all(isinstance(x, str) for x in indexes):
        raise w.error(f"{p}.indexes", "expected a list of index URLs")
    vals["target"], vals["indexes"] = dict(target), tuple(indexes)
    constraints = head.get("constraints", [])
    if not isinstance(constraints, list) or not all(isinstance(x, str) for x in constraints):
        raise w.error(f"{p}.constraints", 'expected a list of requirements like "cuda-python>=13"')
    for item in constraints:
        try:
            parse_constraint(item, "")
        except RecipeError as exc:
            raise w.error(f"{p}.constraints", str(exc).strip()) from None
    vals["constraints"] = tuple(constraints)
    return vals


def parse_lock(path: Path, text: str, where: str | None = None) -> Lock:
    """Validate PEP 751 lock `text` (read from `path`) into a `Lock`; LockFileError on any
    problem, and one line naming ``invoke lock.convert`` for the earlier format."""
    w = _Where(where or str(path), text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockFileError(f"{w.where}: invalid TOML: {exc}") from None
    if is_old_format(data):
        raise LockFileError(
            f"{w.where}: a lock in sm120kit's earlier format ([lock], [[package]]); convert it to"
            f" PEP 751: invoke lock.convert --path {w.where}"
        )
    _keys(w, data, "", _TOP_REQUIRED, _TOP_OPTIONAL)
    if data["lock-version"] != "1.0":
        raise w.error("lock-version", f'expected "1.0" (PEP 751), got {data["lock-version"]!r}')
    vals = _head(w, data)
    want = f"=={vals['python']}.*"
    if data["requires-python"] != want:
        raise w.error("requires-python", f"expected {want!r} for Python {vals['python']}")
    raw = data["packages"]
    if not isinstance(raw, list) or not raw:
        raise w.error("packages", "expected a non-empty array of tables ([[packages]])")
    entries = [_entry(w, item, i) for i, item in enumerate(raw)]
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.key in seen:
            raise w.error("packages.name", f"{entry.name} is listed twice", i)
        seen[entry.key] = i
    for i, entry in enumerate(entries):
        # Every file's URL passes the lock's indexes when the lock is read (plan and load
        # alike): a lock naming file://, another host or a look-alike of an index is refused
        # before any host is touched.
        problem = url_problem(entry.url, vals["indexes"])
        if problem is not None:
            raise w.error(
                "packages.wheels.url",
                f"{entry.name} {entry.version}: {shown(entry.url)}: {problem}",
                i,
            )
    lock = Lock(path=path, packages=tuple(entries), **vals)
    top = Requirement(lock.top)
    top_entry = lock.entry(top.name)
    if top_entry is None or not top.specifier.contains(top_entry.version, prereleases=True):
        raise w.error("tool.sm120kit.top", f"{lock.top} is not among the lock's packages")
    torch = lock.entry("torch")
    if (torch is None) != (not lock.torch) or (
        torch is not None and Version(torch.version).public != Version(lock.torch).public
    ):
        have = torch.version if torch is not None else "none"
        raise w.error(
            "tool.sm120kit.torch", f"{lock.torch or 'none'} differs from the torch entry's {have}"
        )
    return lock


def _wheel(w: _Where, table: dict[str, Any], prefix: str, i: int) -> tuple[str, str, str, Any]:
    """(filename, url, sha256, size) of a package's one wheel."""
    wheels = table["wheels"]
    if not isinstance(wheels, list) or len(wheels) != 1:
        raise w.error(f"{prefix}.wheels", "expected exactly one wheel (one lock per platform)", i)
    wheel = _keys(w, wheels[0], f"{prefix}.wheels", {"url", "hashes"}, _WHEEL_KEYS, i)
    url = _text(w, wheel, f"{prefix}.wheels", "url", i)
    if "://" not in url:
        raise w.error(f"{prefix}.wheels.url", f"expected a URL, got {url!r}", i)
    filename = wheel.get("name") or urllib.parse.unquote(url.rsplit("/", 1)[-1])
    if not isinstance(filename, str) or "/" in filename or not filename.endswith(".whl"):
        raise w.error(f"{prefix}.wheels.name", f"{filename!r} is not a wheel file name", i)
    hashes = wheel["hashes"]
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise w.error(f"{prefix}.wheels.hashes", "expected { sha256 = <64 lower-case hex> }", i)
    size = wheel.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise w.error(f"{prefix}.wheels.size", f"expected a byte count, got {size!r}", i)
    return filename, url, sha, size


def _entry(w: _Where, item: Any, i: int) -> LockEntry:
    prefix = f"packages[{i}]"
    table = _keys(w, item, prefix, _PKG_REQUIRED, _PKG_OPTIONAL, i)
    name = _text(w, table, prefix, "name", i)
    version = _text(w, table, prefix, "version", i)
    try:
        Version(version)
    except InvalidVersion:
        raise w.error(f"{prefix}.version", f"not a version: {version!r}", i) from None
    filename, url, sha, size = _wheel(w, table, prefix, i)
    tool = table.get("tool", {})
    if not isinstance(tool, dict) or "sm120kit" not in tool:
        raise w.error(f"{prefix}.tool.sm120kit", "missing (from, compiled)", i)
    ours = _keys(w, tool["sm120kit"], f"{prefix}.tool.sm120kit", _OURS_REQUIRED, _OURS_OPTIONAL, i)
    source = ours["from"]
    if source not in FROM:
        raise w.error(
            f"{prefix}.tool.sm120kit.from", f"{source!r} is not one of {', '.join(FROM)}", i
        )
    compiled = ours["compiled"]
    if not isinstance(compiled, bool):
        raise w.error(
            f"{prefix}.tool.sm120kit.compiled", f"expected true or false, got {compiled!r}", i
        )
    verdict = ours.get("verdict", "")
    notes = ours.get("notes", [])
    if not isinstance(verdict, str):
        raise w.error(f"{prefix}.tool.sm120kit.verdict", "expected a string", i)
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise w.error(f"{prefix}.tool.sm120kit.notes", "expected a list of strings", i)
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
    if "lock" in table:
        raise error(
            ("stack", "lock"),
            'replaced by locks = "locks/<name>-<version>" (a directory of PEP 751 pylock '
            "files, one per Python; invoke lock.convert converts an old lock)",
        )
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
    locks = table["locks"].rstrip("/")
    if locks.startswith("/") or ".." in Path(locks).parts or locks.endswith(".toml"):
        raise error(("stack", "locks"), f"{locks!r} must be a directory relative to the repo")
    build = table.get("build", [])
    if not isinstance(build, list) or not all(isinstance(b, str) and b for b in build):
        raise error(("stack", "build"), "expected a list of distribution names")
    indexes = table.get("indexes", [])
    if not isinstance(indexes, list) or not all(
        isinstance(x, str) and re.match(r"^(https?|file)://", x) for x in indexes
    ):
        raise error(("stack", "indexes"), "expected a list of index URLs (https://...)")
    nfa = table.get("not_for_arch", {})
    if not isinstance(nfa, dict):
        raise error(("stack", "not_for_arch"), 'expected a table like { flash_ops = "why" }')
    for module, why in nfa.items():
        if not _MODULE.match(module):
            raise error(
                ("stack", "not_for_arch", module),
                "not a module stem or a path in a wheel without its suffix (pkg/_C)",
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
    offered = table.get("engines", {})
    if not isinstance(offered, dict) or not all(isinstance(v, str) and v for v in offered.values()):
        raise error(("stack", "engines"), 'expected a table like { vllm = "cu13-vllm" }')
    for name in offered:
        if engines.find(name) is None:
            raise error(
                ("stack", "engines", name),
                f"unknown engine; known: {', '.join(engines.names())}",
            )
    return StackSpec(
        engines=dict(offered),
        top=table["top"],
        locks=locks,
        reason=table["reason"],
        build=tuple(build),
        not_for_arch=dict(nfa),
        loaders={str(canonicalize_name(k)): dict(v) for k, v in loaders.items()},
        indexes=tuple(indexes),
    )


def _locks_dir(stack: StackSpec, repo: Path) -> Path:
    path = repo / stack.locks
    if not path.is_dir() and (CHECKOUT / stack.locks).is_dir():
        path = CHECKOUT / stack.locks  # recipes copied elsewhere (tests) use the shipped locks
    return path


def stack_locks(stack: StackSpec, repo: Path) -> dict[str, Lock]:
    """Every lock of the stack's directory, by Python X.Y (``"3.12"``), in version order;
    LockFileError naming the file when one is unusable."""
    found: dict[str, Lock] = {}
    folder = _locks_dir(stack, repo)
    try:
        names = sorted(p.name for p in folder.iterdir() if LOCK_FILE.match(p.name))
    except OSError as exc:
        raise LockFileError(
            f"{stack.locks}: cannot read the lock directory: {exc.strerror}"
        ) from None
    for name in sorted(names, key=lambda n: int(LOCK_FILE.match(n).group(1))):  # type: ignore[union-attr]
        lock = load_lock(folder / name, f"{stack.locks}/{name}")
        found.setdefault(lock.python, lock)
    return found


def lock_for(stack: StackSpec, python: str, repo: Path) -> Lock | None:
    """The stack's lock for Python X.Y `python`, or None when its directory has none."""
    return stack_locks(stack, repo).get(python)


def _pythons(value: Any) -> list[str]:
    """A recipe's ``python`` (one X.Y or a list, in order of preference) as a list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def load_stack(
    stack: StackSpec, repo: Path, torch_specs: dict[str, Any], error: Any, python: Any = None
) -> tuple[StackSpec, Lock]:
    """Load the stack's locks, check each against the recipe (`check_lock`), and return the
    stack with ``lock`` set and the lock for the first of the recipe's Pythons (`python`: X.Y
    or a list in order of preference) that has one."""
    locks = stack_locks(stack, repo)
    if not locks:
        raise error(("stack", "locks"), f"{stack.locks} holds no pylock.cp3*-<platform>.toml")
    for lock in locks.values():
        if lock.top != stack.top:
            name = f"{stack.locks}/{lock.path.name}"
            raise error(("stack", "top"), f"{stack.top!r} differs from {name}'s {lock.top!r}")
        check_lock(stack, lock, torch_specs, error)
    wanted = _pythons(python)
    chosen = next((locks[p] for p in wanted if p in locks), None)
    if chosen is None:
        have = ", ".join(locks)
        raise error(
            ("python",),
            f"{stack.locks} has locks for Python {have}, none for the recipe's {', '.join(wanted)}",
        )
    stack = with_catalogue(stack, _locks_dir(stack, repo), error)
    return replace(stack, lock=f"{stack.locks}/{chosen.path.name}"), chosen


def with_catalogue(stack: StackSpec, folder: Path, error: Any) -> StackSpec:
    """The stack with its lock directory's catalogue facts (sm120kit/stack/catalogue.py, read from
    the locked wheels) added to the verification data: each module without code for a target
    the catalogue judged is reported, not judged (except the one a loader imports), and each
    loader read from a wheel gives its per-arch directories. Where the recipe says otherwise,
    the wheel wins. No catalogue: the recipe's tables alone."""

    try:
        cat = load_beside(folder, f"{stack.locks}/{FILE_NAME}")
    except RecipeError as exc:
        raise error(("stack", "locks"), str(exc)) from None
    if cat is None:
        return stack
    facts: dict[str, str] = {}
    for arch in cat.targets:
        facts.update(cat.not_for_arch(arch))
    return replace(
        stack,
        not_for_arch={**stack.not_for_arch, **facts},
        loaders={**stack.loaders, **cat.loaders()},
    )


def check_lock(stack: StackSpec, lock: Lock, torch_specs: dict[str, Any], error: Any) -> None:
    """Check one lock against the recipe: the same top, every ``build`` name in the lock, and
    each recipe package of a locked name and version (a build candidate) admitting the lock's
    torch. `torch_specs` maps ``name==version`` of the recipe's packages to their torch
    specifier."""
    name = f"{stack.locks}/{lock.path.name}"
    for dist in stack.build:
        if lock.entry(dist) is None:
            raise error(("stack", "build"), f"{dist} is not a distribution of {name}")
    for entry in lock.packages:
        spec = torch_specs.get(f"{entry.key}=={entry.version}")
        if spec is not None and not spec.contains(lock.torch, prereleases=True):
            raise error(
                ("stack", "locks"),
                f"the recipe's {entry.name} {entry.version} entry wants torch '{spec}', but "
                f"{name} locks torch {lock.torch}: a build must use the lock's torch",
            )


def check_stack_lock(stack: StackSpec, repo: Path, torch_specs: dict[str, Any], error: Any) -> Lock:
    """The lock for the stack's first Python (`load_stack` without a recipe's preference)."""
    locks = stack_locks(stack, repo)
    return load_stack(stack, repo, torch_specs, error, list(locks))[1]


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
    """The lock as PEP 751 TOML text (packages sorted by name), `header` lines as leading
    comments; ours in ``[tool.sm120kit]`` and each package's ``[packages.tool.sm120kit]``."""
    lines = [f"# {h}" if h else "#" for h in header]
    lines += [
        'lock-version = "1.0"',
        f'requires-python = "=={lock.python}.*"',
        'created-by = "sm120kit"',
        "",
        "[tool.sm120kit]",
    ]
    fields: dict[str, Any] = {"top": lock.top, "python": lock.python, "platform": lock.platform}
    if lock.torch:
        fields.update(torch=lock.torch, torch_cuda=lock.torch_cuda)
    fields.update(resolver=lock.resolver, drafted=lock.drafted)
    if lock.target:
        fields["target"] = dict(lock.target)
    if lock.indexes:
        fields["indexes"] = list(lock.indexes)
    if lock.constraints:
        fields["constraints"] = list(lock.constraints)
    lines += [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    for entry in sorted(lock.packages, key=lambda e: e.key):
        wheel: dict[str, Any] = {"name": entry.filename, "url": entry.url}
        if entry.size is not None:
            wheel["size"] = entry.size
        wheel["hashes"] = {"sha256": entry.sha256}
        lines += ["", "[[packages]]", f"name = {_toml_value(entry.name)}"]
        lines += [f"version = {_toml_value(entry.version)}", f"wheels = [{_toml_value(wheel)}]"]
        ours: dict[str, Any] = {"from": entry.source, "compiled": entry.compiled}
        if entry.verdict:
            ours["verdict"] = entry.verdict
        if entry.notes:
            ours["notes"] = list(entry.notes)
        lines += ["", "[packages.tool.sm120kit]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in ours.items()]
    return "\n".join(lines) + "\n"


#: This checkout's root, where the shipped ``locks/`` live.
CHECKOUT = Path(__file__).resolve().parents[2]


def locks_root(base: Path) -> Path:
    """Where a recipe's ``stack.locks`` paths start: `base` (the directory above ``recipes/``);
    a directory not found there is looked up in this checkout (`stack_locks`)."""
    return base

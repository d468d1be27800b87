"""Resolving a lock's closure with uv, for `sm120kit.stack.draft`.

The resolver is uv (pinned in pyproject, run as ``python -m uv``), not the controller's pip:
``uv pip compile --format pylock.toml --python-version X.Y --python-platform
x86_64-manylinux_2_34`` resolves for any Python and platform from any machine (pip's
``--report`` resolves only for the interpreter it runs in). uv's pylock lists every file a
package has for that environment; this module keeps the one wheel a host's installer would
pick (the most specific tag, as `packaging.tags` orders them), and names each package that
has no wheel at all for it:

- a wheel stub (NVIDIA's pattern: an sdist whose ``pyproject.toml`` build backend is
  ``wheel_stub.buildapi`` and whose ``[tool.wheel_stub] index_url`` names the index its real
  wheel is on) is taken from that index when it is one of the indexes given; otherwise the
  draft stops with one line naming the distribution and the index;
- anything else with only an sdist stops the draft with one line naming it.

Inputs are checked by one strict parser (`parse_pin`): a requirement is a name, ``==`` and a
version, and nothing else.
"""

from __future__ import annotations

import html.parser
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from typing import Any

from packaging import tags as ptags
from packaging.markers import Marker
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import RecipeError
from ..remote.lib.download import redact_text
from .constraints import FILE_NAME as CONSTRAINTS_FILE
from .constraints import uv_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: The uv this project pins (pyproject.toml); the resolver line of a lock names it.
UV_VERSION = "0.13.9"
PYPI = "https://pypi.org/simple"
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIN = re.compile(rf"^({_NAME})==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_MANYLINUX = re.compile(r"^manylinux_2_(\d+)_(x86_64|aarch64)$")
#: Largest sdist read to find a wheel stub's index (a stub is a few KB).
_STUB_MAX = 1 << 20


def parse_pin(text: Any, flag: str = "--top") -> str:
    """``name==version`` exactly (no spaces, markers, extras, other operators), normalised
    to the canonical name; RecipeError naming `flag` otherwise."""
    value = text if isinstance(text, str) else ""
    m = _PIN.match(value)
    if m:
        try:
            Version(m.group(2))
        except InvalidVersion:
            m = None
    if not m:
        raise RecipeError(
            f"{flag} {text!r}: expected NAME==VERSION and nothing else (e.g. sglang==0.5.23)"
        )
    return f"{canonicalize_name(m.group(1))}=={m.group(2)}"


def parse_python(text: Any, flag: str = "--python") -> str:
    """``3.Y`` exactly; RecipeError naming `flag` otherwise."""
    if not isinstance(text, str) or not re.fullmatch(r"3\.\d{1,2}", text.strip()):
        raise RecipeError(f"{flag} {text!r}: expected a Python X.Y like 3.12")
    return text.strip()


def parse_index(text: Any, flag: str = "--index") -> str:
    """An index URL (http, https or file), without a trailing slash."""
    value = text.strip() if isinstance(text, str) else ""
    try:
        parsed = urllib.parse.urlparse(value)
        parsed.port  # noqa: B018 - raises ValueError on a bad port, as urlparse does on "[::1"
    except ValueError as exc:
        raise RecipeError(f"{flag} {text!r}: not a URL ({exc})") from None
    if parsed.scheme not in ("http", "https", "file") or (
        parsed.scheme != "file" and not parsed.netloc
    ):
        raise RecipeError(f"{flag} {text!r}: expected an index URL like https://pypi.org/simple")
    return value.rstrip("/")


def uv_platform(platform: str) -> str:
    """``manylinux_2_34_x86_64`` -> uv's ``x86_64-manylinux_2_34``."""
    m = _MANYLINUX.match(platform)
    if not m:
        raise RecipeError(f"--platform {platform}: expected a tag like manylinux_2_34_x86_64")
    return f"{m.group(2)}-manylinux_2_{m.group(1)}"


def platform_tags(platform: str) -> list[str]:
    """``manylinux_2_34_x86_64`` -> every manylinux tag a glibc 2.34 host accepts, newest
    first, with the legacy aliases (manylinux2014 = 2_17, manylinux2010 = 2_12,
    manylinux1 = 2_5)."""
    m = _MANYLINUX.match(platform)
    if not m:
        raise RecipeError(f"--platform {platform}: expected a tag like manylinux_2_34_x86_64")
    glibc, machine = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{machine}" for minor, name in legacy.items() if minor <= glibc]
    return tags


def tag_priority(python: str, platform: str) -> dict[ptags.Tag, int]:
    """Every tag a CPython `python` host on `platform` installs, most preferred first (0)."""
    major, minor = (int(x) for x in python.split("."))
    plats = platform_tags(platform)
    order = list(ptags.cpython_tags((major, minor), platforms=plats))
    order += list(ptags.compatible_tags((major, minor), f"cp{major}{minor}", platforms=plats))
    prio: dict[ptags.Tag, int] = {}
    for i, tag in enumerate(order):
        prio.setdefault(tag, i)
    return prio


def environment(python: str, platform: str) -> dict[str, str]:
    """The marker environment of a CPython `python` Linux host on `platform`."""
    machine = "x86_64" if platform.endswith("x86_64") else platform.rsplit("_", 1)[-1]
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": machine,
    }


@dataclass(frozen=True)
class Wheel:
    """One chosen file of a resolved package."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None


@dataclass(frozen=True)
class NoWheel:
    """A resolved package without a wheel for the environment: its sdist, if any."""

    name: str
    version: str
    sdist_url: str
    sdist_sha256: str


def best_wheel(files: list[dict[str, Any]], prio: dict[ptags.Tag, int]) -> dict[str, Any] | None:
    """The file an installer picks: the wheel whose best tag ranks first."""
    best: tuple[int, dict[str, Any]] | None = None
    for wheel in files:
        url = str(wheel.get("url") or wheel.get("path") or "")
        filename = str(wheel.get("name") or urllib.parse.unquote(url.rsplit("/", 1)[-1]))
        try:
            _n, _v, _b, wtags = parse_wheel_filename(filename)
        except ValueError:
            continue
        ranks = [prio[t] for t in wtags if t in prio]
        if ranks and (best is None or min(ranks) < best[0]):
            best = (min(ranks), {**wheel, "name": filename, "url": url})
    return best[1] if best else None


def split_pylock(
    doc: dict[str, Any], python: str, platform: str
) -> tuple[list[Wheel], list[NoWheel]]:
    """uv's pylock for (`python`, `platform`): one wheel per package that applies there, and
    the packages with none."""
    prio = tag_priority(python, platform)
    env = environment(python, platform)
    wheels: list[Wheel] = []
    missing: list[NoWheel] = []
    for pkg in doc.get("packages") or []:
        marker = pkg.get("marker")
        if marker and not Marker(marker).evaluate(env):
            continue
        name, version = str(pkg["name"]), str(pkg.get("version", ""))
        chosen = best_wheel(list(pkg.get("wheels") or []), prio)
        if chosen is None:
            sdist = pkg.get("sdist") or {}
            sha = (sdist.get("hashes") or {}).get("sha256", "")
            missing.append(NoWheel(name, version, str(sdist.get("url", "")), str(sha)))
            continue
        sha = (chosen.get("hashes") or {}).get("sha256")
        if not sha:
            raise RecipeError(f"{name} {version}: uv's lock gives {chosen['name']} no sha256")
        wheels.append(
            Wheel(name, version, chosen["name"], chosen["url"], sha.lower(), chosen.get("size"))
        )
    return wheels, missing


def uv_argv(
    top: str, python: str, platform: str, indexes: list[str], constraints: str | None = None
) -> list[str]:
    """``python -m uv pip compile`` for `top` on (`python`, `platform`), from `indexes` (the
    first is the default index, the rest extra ones), without uv's managed Pythons;
    `constraints`: a constraints file (uv's ``-c``)."""
    argv = [sys.executable, "-m", "uv", "pip", "compile", "-", "--format", "pylock.toml"]
    if constraints:
        argv += ["-c", constraints]
    argv += ["--python-version", python, "--python-platform", uv_platform(platform)]
    argv += ["--no-header", "--quiet", "--no-python-downloads"]
    if indexes:
        argv += ["--default-index", indexes[0]]
        for extra in indexes[1:]:
            argv += ["--index", extra]
    return argv


def _connection_line(stderr: str) -> str | None:
    """uv's chain of causes, when it failed to reach an index (not a resolution failure)."""
    causes = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    text = " ".join(causes)
    needles = ("error sending request", "Failed to fetch", "dns error", "Connection refused")
    if any(n in text for n in needles):
        return causes[-1].removeprefix("Caused by: ")
    return None


def check_index(index: str, name: str, timeout: float = 20.0) -> None:
    """Reach `index`'s page for `name` (PEP 503); RecipeError naming the index as a
    connection problem when it cannot be read (so a dead index is never reported as a
    missing distribution)."""
    url = f"{index}/{canonicalize_name(name)}/"
    if url.startswith("file://"):
        path = urllib.parse.unquote(urllib.parse.urlparse(index).path)
        if not os.path.isdir(path):
            raise RecipeError(f"--index {index}: cannot reach the index: no such directory")
        return
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - index URL
            resp.read(1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return  # reachable; the name is simply not on this index
        raise RecipeError(f"--index {index}: the index answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RecipeError(f"--index {index}: cannot reach the index: {reason}") from None


def compile_pylock(
    top: str, python: str, platform: str, indexes: list[str], constraints: tuple[str, ...] = ()
) -> tuple[dict[str, Any], str]:
    """uv's PEP 751 lock of `top` for (`python`, `platform`), parsed, and the resolver line
    (`constraints`, `sm120kit.stack.constraints`: shown as the file kept beside the lock)."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}
    with tempfile.TemporaryDirectory(prefix="draft-constraints-") as tmp:
        given = uv_file(constraints, tmp) if constraints else None
        argv = uv_argv(top, python, platform, indexes, given)
        proc = subprocess.run(argv, input=top + "\n", capture_output=True, text=True, env=env)
    if given:  # the temporary path means nothing in a lock: name the file it was made from
        argv[argv.index(given)] = CONSTRAINTS_FILE
    if proc.returncode != 0:
        where = ", ".join(indexes) or PYPI
        conn = _connection_line(proc.stderr)
        if conn:
            raise RecipeError(f"uv cannot reach the index ({where}) for {top}: {conn}")
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        tail = " ".join(lines)[-400:] or f"exit {proc.returncode}"
        held = f" (constraints: {', '.join(constraints)})" if constraints else ""
        raise RecipeError(
            f"uv cannot resolve {top}{held} for Python {python} on {platform}: {tail}"
        )
    try:
        doc = tomllib.loads(proc.stdout)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"uv's pylock for {top} is not TOML: {exc}") from None
    shown = " ".join(a for a in argv[3:] if a != "-")
    return doc, redact_text(f"uv {UV_VERSION} {shown}")  # recorded in the lock: no password


def stub_index(sdist: bytes) -> str | None:
    """The ``[tool.wheel_stub] index_url`` of a wheel-stub sdist (its ``pyproject.toml``'s
    build backend is ``wheel_stub.buildapi``), or None for any other sdist."""
    try:
        with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:*") as tar:
            member = next(
                (
                    m
                    for m in tar.getmembers()
                    if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")
                ),
                None,
            )
            handle = tar.extractfile(member) if member is not None else None
            text = handle.read().decode("utf-8") if handle is not None else ""
    except (tarfile.TarError, OSError, UnicodeDecodeError):
        return None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    if (doc.get("build-system") or {}).get("build-backend") != "wheel_stub.buildapi":
        return None
    url = ((doc.get("tool") or {}).get("wheel_stub") or {}).get("index_url")
    return str(url).rstrip("/") if isinstance(url, str) and url else None


def _read_url(url: str, limit: int, timeout: float = 60.0) -> bytes:
    if url.startswith("file://"):
        with open(urllib.parse.unquote(urllib.parse.urlparse(url).path), "rb") as fh:
            return fh.read(limit + 1)
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - index URL
        return bytes(resp.read(limit + 1))


class _Links(html.parser.HTMLParser):
    """The ``<a href>`` links of a PEP 503 simple page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def index_files(index: str, name: str) -> list[tuple[str, str, str]]:
    """(filename, absolute URL, sha256 from the link's fragment) of every file `index`'s
    PEP 503 page lists for `name`; RecipeError naming the index when it cannot be read."""
    page = f"{index}/{canonicalize_name(name)}/"
    try:
        if page.startswith("file://"):
            path = urllib.parse.unquote(urllib.parse.urlparse(page).path)
            body = open(os.path.join(path, "index.html"), "rb").read()
        else:
            body = _read_url(page, 32 << 20)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RecipeError(f"--index {index}: cannot reach the index ({page}): {reason}") from None
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    out = []
    for href in parser.links:
        url = urllib.parse.urljoin(page, href)
        base, _, frag = url.partition("#")
        sha = frag[len("sha256=") :] if frag.startswith("sha256=") else ""
        out.append((urllib.parse.unquote(base.rsplit("/", 1)[-1]), base, sha))
    return out


def python_versions(top: str, index: str = PYPI) -> list[str]:
    """The Python X.Y versions `top`'s release has CPython wheels for on `index` (its
    ``cpXY`` tags; an abi3 wheel counts from its minimum on, up to 3.14), sorted."""
    name, version = top.split("==", 1)
    found: set[str] = set()
    for filename, _url, _sha in index_files(index, name):
        if not filename.endswith(".whl"):
            continue
        try:
            _n, ver, _b, wtags = parse_wheel_filename(filename)
        except ValueError:
            continue
        if str(ver) != str(Version(version)):
            continue
        for tag in wtags:
            m = re.fullmatch(r"cp3(\d+)", tag.interpreter)
            if m and tag.abi == "abi3":
                found.update(f"3.{y}" for y in range(int(m.group(1)), 15))
            elif m:
                found.add(f"3.{m.group(1)}")
    return sorted(found, key=lambda v: int(v.split(".")[1]))


def resolve_missing(
    missing: list[NoWheel], python: str, platform: str, indexes: list[str]
) -> list[Wheel]:
    """A wheel for each package uv found no wheel for: a wheel stub's real wheel from its
    index when that index is one of `indexes`; RecipeError (one line) for the first that
    cannot be had."""
    prio = tag_priority(python, platform)
    out = []
    for item in missing:
        where = None
        if item.sdist_url:
            try:
                data = _read_url(item.sdist_url, _STUB_MAX)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise RecipeError(
                    f"{item.name} {item.version}: cannot read its sdist: {exc}"
                ) from None
            where = stub_index(data) if len(data) <= _STUB_MAX else None
        if where is None:
            raise RecipeError(
                f"{item.name} {item.version} has no wheel for Python {python} on {platform}"
                " (only an sdist): a lock holds wheels only, so this Python cannot be locked"
            )
        given = [i for i in indexes if i.rstrip("/") == where.rstrip("/")]
        if not given:
            raise RecipeError(
                f"{item.name} {item.version} on this index is a wheel stub: its wheel is on "
                f"{where}; add --index {where} (or the recipe's [stack] indexes) to lock it"
            )
        files = [
            {"name": f, "url": u, "hashes": {"sha256": s}}
            for f, u, s in index_files(given[0], item.name)
            if f.endswith(".whl") and s and _version_of(f) == str(Version(item.version))
        ]
        chosen = best_wheel(files, prio)
        if chosen is None:
            raise RecipeError(
                f"{item.name} {item.version}: {given[0]} has no wheel of it for Python {python}"
                f" on {platform}"
            )
        sha = chosen["hashes"]["sha256"].lower()
        out.append(Wheel(item.name, item.version, chosen["name"], chosen["url"], sha, None))
    return out


def _version_of(filename: str) -> str:
    try:
        return str(parse_wheel_filename(filename)[1])
    except ValueError:
        return ""


def metadata_requires(wheel_path: str) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""

    with zipfile.ZipFile(wheel_path) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            return []
        text = zf.read(meta).decode("utf-8", "replace")
    return [
        ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")
    ]

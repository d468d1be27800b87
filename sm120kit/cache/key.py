"""The wheel-cache key: a sha256 over every input that can change a built wheel's bytes.

Inputs that cannot change the output (parallelism knobs, paths, host names) are filtered out
of the build env before hashing, so two hosts that build the same thing share one entry.
Bump :data:`CACHE_FORMAT_VERSION` whenever the key's inputs or their canonical encoding change;
``tests/unit/test_cache_key.py`` pins a golden key so an accidental change fails loudly.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Version of the key recipe and of the entry layout; part of every key.
CACHE_FORMAT_VERSION = 1

#: Env names that never reach the compiled code: parallelism knobs, and per-host/per-user
#: state. Matching is exact (case-sensitive, as env names are).
EXCLUDED_ENV_NAMES: frozenset[str] = frozenset(
    {
        # Parallelism: changes how fast, never what is built.
        "MAX_JOBS",
        "NVCC_THREADS",
        "CMAKE_BUILD_PARALLEL_LEVEL",
        "SGL_KERNEL_COMPILE_THREADS",
        "MAKEFLAGS",
        "NINJAFLAGS",
        "NINJA_STATUS",
        # Host, user and session state.
        "HOME",
        "USER",
        "LOGNAME",
        "HOSTNAME",
        "HOST",
        "SHELL",
        "PWD",
        "OLDPWD",
        "TERM",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "TMP",
        "TEMP",
        "SSH_AUTH_SOCK",
        "SSH_CONNECTION",
        "SSH_CLIENT",
        "SSH_TTY",
        "DISPLAY",
        "PATH",
        "LD_LIBRARY_PATH",
        "LIBRARY_PATH",
        "CPATH",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        # Toolkit location: the toolkit *version* is a key input of its own.
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDACXX",
        # Caches of intermediate results do not change the result.
        "CCACHE_DIR",
        "SCCACHE_DIR",
        "PIP_CACHE_DIR",
        "XDG_CACHE_HOME",
    }
)

#: Env name prefixes that are per-host/per-session state.
EXCLUDED_ENV_PREFIXES: tuple[str, ...] = ("SSH_", "XDG_", "SM120KIT_RUN_", "CCACHE_", "SCCACHE_")

#: Env name suffixes that name locations, not build choices.
EXCLUDED_ENV_SUFFIXES: tuple[str, ...] = ("_HOME", "_DIR", "_PATH", "_ROOT", "_PREFIX")

_PATHLIKE_VALUE = re.compile(r"^(~|/|\./|\.\./)")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

# Directory names never part of a source tree's identity.
_TREE_SKIP = frozenset({".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


def _pathlike(value: str) -> bool:
    """True for a value that names a location (one path or a ':'-joined list of paths)."""
    parts = [p for p in value.split(os.pathsep) if p]
    return bool(parts) and all(_PATHLIKE_VALUE.match(p) for p in parts)


def env_excluded(name: str, value: str) -> bool:
    """True when an env var cannot change the built binary and so stays out of the key."""
    if name in EXCLUDED_ENV_NAMES:
        return True
    if name.startswith(EXCLUDED_ENV_PREFIXES) or name.endswith(EXCLUDED_ENV_SUFFIXES):
        return True
    return _pathlike(value)


def filter_build_env(env: Mapping[str, Any]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Split a resolved build env into (kept vars, sorted names of dropped vars)."""
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for name in sorted(env):
        value = str(env[name])
        if env_excluded(name, value):
            dropped.append(name)
        else:
            kept[name] = value
    return kept, tuple(dropped)


#: ``source_digest`` tag of a released file (a lock's wheel): the sha256 of the file itself
#: (a build's sources are ``sha256:`` of an sdist, ``git:`` or ``tree:``), so the two never
#: share a key, and an entry under such a key must hold exactly those bytes.
RELEASE_TAG = "release-sha256:"


@dataclass(frozen=True)
class KeyInputs:
    """Everything that can change a built wheel. Build with keywords; see module docstring.

    ``build_env`` is filtered on construction (see :func:`env_excluded`); the names dropped
    are kept in ``dropped_env`` for display only and are no part of the key.
    ``source_digest`` is a tagged string: ``sha256:<hex>`` (sdist), ``git:<commit>``, or
    ``tree:<hex>`` (an uploaded tree, see :func:`tree_digest`). ``dependencies`` holds
    (directory name, ``tree:<hex>``) per build dependency the tool supplies (a CMake package's
    FetchContent trees, `sm120kit.builds.sources`); empty, it stays out of the hashed JSON, so keys
    of packages without dependencies are unchanged.
    """

    package: str
    version: str
    source_digest: str
    patches: tuple[tuple[str, str], ...] = ()
    build_env: Mapping[str, str] = field(default_factory=dict, hash=False)
    arch_list: tuple[str, ...] = ()
    cuda_version: str = ""
    torch_version: str = ""
    torch_cxx11_abi: bool = True
    python_abi: str = ""
    platform: str = ""
    cc_version: str = ""
    format_version: int = CACHE_FORMAT_VERSION
    dependencies: tuple[tuple[str, str], ...] = ()
    dropped_env: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.package or not self.version or not self.source_digest:
            raise ValueError("KeyInputs needs package, version and source_digest")
        patches = tuple((str(n), str(d)) for n, d in self.patches)
        for name, digest in patches:
            if not _HEX64.match(digest):
                raise ValueError(f"patch {name}: digest {digest!r} is not a sha256 hex string")
        kept, dropped = filter_build_env(self.build_env)
        # A private copy: a caller mutating its dict later must not change this key.
        object.__setattr__(self, "patches", patches)
        object.__setattr__(
            self, "dependencies", tuple((str(n), str(d)) for n, d in self.dependencies)
        )
        object.__setattr__(self, "build_env", kept)
        object.__setattr__(self, "dropped_env", tuple(sorted(set(dropped) | set(self.dropped_env))))
        object.__setattr__(self, "arch_list", tuple(str(a).strip() for a in self.arch_list))
        object.__setattr__(self, "torch_cxx11_abi", bool(self.torch_cxx11_abi))
        object.__setattr__(self, "format_version", int(self.format_version))

    def to_dict(self) -> dict[str, Any]:
        """The hashed inputs as plain JSON types (stored in each entry's meta.json)."""
        doc: dict[str, Any] = {
            "package": self.package,
            "version": self.version,
            "source_digest": self.source_digest,
            "patches": [[n, d] for n, d in self.patches],
            "build_env": dict(self.build_env),
            "arch_list": list(self.arch_list),
            "cuda_version": self.cuda_version,
            "torch_version": self.torch_version,
            "torch_cxx11_abi": self.torch_cxx11_abi,
            "python_abi": self.python_abi,
            "platform": self.platform,
            "cc_version": self.cc_version,
            "format_version": self.format_version,
        }
        if self.dependencies:
            doc["dependencies"] = [[n, d] for n, d in self.dependencies]
        return doc

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeyInputs:
        """Inverse of :meth:`to_dict`."""
        return cls(
            package=data["package"],
            version=data["version"],
            source_digest=data["source_digest"],
            patches=tuple((n, d) for n, d in data.get("patches", ())),
            build_env=dict(data.get("build_env", {})),
            arch_list=tuple(data.get("arch_list", ())),
            cuda_version=data.get("cuda_version", ""),
            torch_version=data.get("torch_version", ""),
            torch_cxx11_abi=data.get("torch_cxx11_abi", True),
            python_abi=data.get("python_abi", ""),
            platform=data.get("platform", ""),
            cc_version=data.get("cc_version", ""),
            format_version=data.get("format_version", CACHE_FORMAT_VERSION),
            dependencies=tuple((n, d) for n, d in data.get("dependencies", ())),
        )


def canonical_json(inputs: KeyInputs) -> str:
    """The exact text hashed into the key: sorted keys, no whitespace, ASCII only."""
    return json.dumps(inputs.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def compute_key(inputs: KeyInputs) -> str:
    """The cache key (64 lowercase hex chars) of a set of inputs."""
    return hashlib.sha256(canonical_json(inputs).encode("ascii")).hexdigest()


def describe(inputs: KeyInputs) -> list[tuple[str, str]]:
    """(label, value) rows showing each input and, last, the key; for ``invoke cache.key``."""
    rows: list[tuple[str, str]] = [
        ("package", inputs.package),
        ("version", inputs.version),
        ("source", inputs.source_digest),
    ]
    rows += [(f"patch {name}", digest) for name, digest in inputs.patches] or [("patches", "-")]
    rows += [(f"dependency {name}", digest) for name, digest in inputs.dependencies]
    rows += [(f"env {name}", value) for name, value in sorted(inputs.build_env.items())]
    if inputs.dropped_env:
        rows.append(("env ignored", ", ".join(inputs.dropped_env)))
    rows += [
        ("arch list", ";".join(inputs.arch_list) or "-"),
        ("cuda", inputs.cuda_version or "-"),
        ("torch", inputs.torch_version or "-"),
        ("torch cxx11 abi", "1" if inputs.torch_cxx11_abi else "0"),
        ("python abi", inputs.python_abi or "-"),
        ("platform", inputs.platform or "-"),
        ("host compiler", inputs.cc_version or "-"),
        ("format", str(inputs.format_version)),
        ("key", compute_key(inputs)),
    ]
    return rows


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 hex of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sdist_digest(path: str | os.PathLike[str]) -> str:
    """Source digest of an sdist/tarball: ``sha256:<hex>``."""
    return "sha256:" + file_sha256(path)


def git_digest(commit: str) -> str:
    """Source digest of a git checkout: ``git:<full commit id>``."""
    commit = commit.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise ValueError(f"git commit {commit!r} is not a full commit id")
    return "git:" + commit


def tree_digest(root: str | os.PathLike[str]) -> str:
    """Source digest of a directory tree: ``tree:<hex>`` over relative paths, modes, contents.

    The root's own path and file times stay out, so the same tree uploaded to two places
    hashes the same. VCS and cache directories are skipped; symlinks hash as their target text.
    """
    base = Path(root)
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in _TREE_SKIP)
        for name in sorted(filenames):
            if name.endswith(".pyc"):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(base).as_posix()
            if path.is_symlink():
                entry = f"L {rel} {os.readlink(path)}"
            else:
                executable = "x" if os.access(path, os.X_OK) else "-"
                entry = f"F {rel} {executable} {file_sha256(path)}"
            digest.update(entry.encode("utf-8", "surrogateescape") + b"\n")
    return "tree:" + digest.hexdigest()


def patch_digests(paths: Iterable[str | os.PathLike[str]]) -> tuple[tuple[str, str], ...]:
    """(file name, sha256) of each patch, in application order."""
    return tuple((Path(p).name, file_sha256(p)) for p in paths)

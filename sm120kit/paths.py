"""Every path the tool uses on a host, all under the host's one work_root."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass


def _safe(part: str) -> str:
    """A path component from a name/version (no slashes, no shell surprises)."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", part)


@dataclass(frozen=True)
class HostPaths:
    """Paths under an absolute work_root (as resolved on the host by the facts probe)."""

    work_root: str

    def join(self, *parts: str) -> str:
        return posixpath.join(self.work_root, *parts)

    def toolkit(self, version: str) -> str:
        return self.join("toolkits", f"cuda-{_safe(version)}")

    def env(self, recipe: str, python: str, torch: str, flavour: str) -> str:
        name = f"{_safe(recipe)}-py{_safe(python)}-torch{_safe(torch)}-{_safe(flavour)}"
        return self.join("envs", name)

    def source(self, package: str, version: str, digest: str) -> str:
        return self.join("src", f"{_safe(package)}-{_safe(version)}-{_safe(digest)[:12]}")

    def build(self, package: str) -> str:
        return self.join("build", _safe(package))

    @property
    def wheel_cache(self) -> str:
        return self.join("cache", "wheels")

    @property
    def downloads(self) -> str:
        return self.join("downloads")

    @property
    def logs(self) -> str:
        return self.join("logs")

    @property
    def tmp(self) -> str:
        return self.join("tmp")

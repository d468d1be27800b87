"""Ansible-compatible inventories: YAML or INI files, group_vars/ and host_vars/, host patterns.

`load_inventory` reads one inventory file (YAML, JSON or INI) plus the `group_vars/` and
`host_vars/` directories beside it, applies Ansible's variable precedence and returns an
`Inventory` whose `select` resolves a ``--host`` pattern. Every mistake in an inventory raises ONE
`InventoryError` whose message starts with ``file:line: key.path:``.

What "as Ansible does" means here is pinned by tests/test_ansible_compat.py against ansible-core
(`ansible-inventory --list`, `list_hosts`); the sources followed are ansible-core's
`plugins/inventory/ini.py` and `yaml.py`, `inventory/data.py`, `inventory/group.py` and
`inventory/manager.py`. Deliberate differences are listed in docs/inventory.md.
"""

from __future__ import annotations

import ast
import copy
import difflib
import fnmatch
import ipaddress
import os
import re
import shlex
import string
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sm120kit.errors import InventoryError
from sm120kit.host import Host
from sm120kit.hostvars import check_host_vars

__all__ = ["Group", "Inventory", "load_inventory"]

#: The only keys a YAML group may hold.
GROUP_KEYS = ("hosts", "children", "vars")
#: Extensions of the files read from group_vars/ and host_vars/ ("" = bare NAME).
VARS_EXTENSIONS = ("", ".yaml", ".yml", ".json")
#: Extensions Ansible's YAML inventory plugin accepts ("" = none): its `yaml_extensions`.
YAML_EXTENSIONS = ("", ".yaml", ".yml", ".json")

_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"
_INI_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$")
_INI_GROUP_LINE = re.compile(r"^([^:\]\[\s]+)\s*(?:[#;].*)?$")
# Characters that would make a name ambiguous in a --host pattern.
_BAD_NAME_CHARS = re.compile(r"[\s,!&\[\]*?=]")
_PATTERN_TOKEN = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_BRACKETED_V6 = re.compile(r"\[([^\]]*)\](?::([^:]*))?")
_GLOB_CHARS = ("*", "?", "[")


@dataclass
class Group:
    """A resolved inventory group.

    `hosts` lists direct and transitive members in Ansible's order (see `_descendants`);
    `direct_hosts` the members named in the group itself, in the order they were added;
    `children` the direct child groups; `vars` the group's own variables (inventory file, then
    group_vars/NAME on top), not the inherited ones.
    """

    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    #: `ansible_group_priority` (inventory file only, as in Ansible); orders same-depth groups.
    priority: int = 1
    #: Distance from `all` along the longest parent chain; parents merge before children.
    depth: int = 0
    direct_hosts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Origin:
    """Where one variable value was written."""

    source: str  # shown in Host.var_sources, e.g. "inventory/hosts.yaml: group gpus"
    where: str  # error prefix, e.g. "inventory/hosts.yaml:7: all.children.gpus.vars.x"


_Vars = dict[str, tuple[Any, _Origin]]


@dataclass
class _RawGroup:
    name: str
    vars: _Vars = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    child_where: dict[str, str] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    priority: int = 1


@dataclass
class _RawHost:
    name: str
    vars: _Vars = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)


class _Raw:
    """What the file says, before groups and variables are resolved."""

    def __init__(self) -> None:
        self.groups: dict[str, _RawGroup] = {}
        self.hosts: dict[str, _RawHost] = {}
        self.add_group("all")
        self.add_group("ungrouped")
        # Ansible's InventoryData starts with exactly this edge, so `ungrouped` is all's first
        # child (and its hosts come first in `all`).
        self.groups["all"].children.append("ungrouped")
        self.groups["all"].child_where["ungrouped"] = "(implicit)"

    def add_group(self, name: str) -> _RawGroup:
        if name not in self.groups:
            self.groups[name] = _RawGroup(name)
        return self.groups[name]

    def add_host(self, group: str, name: str) -> None:
        host = self.hosts.setdefault(name, _RawHost(name))
        if group not in host.groups:
            host.groups.append(group)
        members = self.add_group(group).hosts
        if name not in members:
            members.append(name)

    def add_child(self, parent: str, child: str, where: str) -> None:
        if child == "all":
            raise InventoryError(
                f"{where}: child group cycle: {parent} -> all (every group is already inside 'all')"
            )
        group = self.add_group(parent)
        self.add_group(child)
        if child not in group.children:
            group.children.append(child)
            group.child_where[child] = where

    def set_group_var(self, group: str, key: str, value: Any, origin: _Origin) -> None:
        _check_var(key, value, origin)
        target = self.add_group(group)
        if key == "ansible_group_priority":
            # Ansible keeps it out of the vars: it orders groups, it is not a host variable.
            target.priority = _as_int(value, origin, "ansible_group_priority")
            return
        target.vars[key] = (value, origin)

    def set_host_var(self, host: str, key: str, value: Any, origin: _Origin) -> None:
        _check_var(key, value, origin)
        self.hosts[host].vars[key] = (value, origin)


def _as_int(value: Any, origin: _Origin, what: str) -> int:
    if isinstance(value, bool) or not (
        isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())
    ):
        raise InventoryError(f"{origin.where}: {what} must be an integer, got {value!r}")
    return int(value)


def _check_var(key: str, value: Any, origin: _Origin) -> None:
    if key == "ansible_port":
        port = _as_int(value, origin, "ansible_port")
        if not 0 < port < 65536:
            raise InventoryError(f"{origin.where}: ansible_port must be 1-65535, got {port}")


def _display_path(path: Path) -> str:
    """The path relative to the current directory when it lies below it, else as given."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path(os.path.abspath(os.getcwd()))))
    except ValueError:
        return str(path)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- host names, ranges


def _expand_range(name: str, where: str) -> list[str]:
    """Expand Ansible host ranges: gpu[1:4], node[01:10] (padding kept), rack[a:c], x[0:8:2]."""
    if "[" not in name and "]" not in name:
        return [name]
    match = re.match(r"^([^\[\]]*)\[([^\[\]]*)\](.*)$", name)
    if not match:
        raise InventoryError(f"{where}: bad host range in {name!r} (expected e.g. gpu[1:4])")
    head, body, tail = match.groups()
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise InventoryError(
            f"{where}: bad host range [{body}] in {name!r} (expected [start:end] or [start:end:step])"
        )
    beg, end = bounds[0] or "0", bounds[1]  # Ansible: an empty start means 0
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise InventoryError(f"{where}: bad host range [{body}] in {name!r} (no end value)")
    if not step_text.isdigit() or int(step_text) == 0:
        raise InventoryError(f"{where}: bad host range [{body}] in {name!r} (bad step)")
    step = int(step_text)
    seq: list[str]
    if beg.isdigit() and end.isdigit():
        width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
        if width and len(end) != width:
            raise InventoryError(
                f"{where}: bad host range [{body}] in {name!r}"
                " (a zero-padded range needs start and end of equal length)"
            )
        if int(beg) > int(end):
            raise InventoryError(f"{where}: bad host range [{body}] in {name!r} (start > end)")
        seq = [str(i).zfill(width) for i in range(int(beg), int(end) + 1, step)]
    elif len(beg) == 1 and len(end) == 1 and beg.isalpha() and end.isalpha():
        letters = string.ascii_letters
        if beg not in letters or end not in letters or letters.index(beg) > letters.index(end):
            raise InventoryError(f"{where}: bad host range [{body}] in {name!r} (start > end)")
        seq = list(letters[letters.index(beg) : letters.index(end) + 1 : step])
    else:
        raise InventoryError(
            f"{where}: bad host range [{body}] in {name!r}"
            " (bounds must both be numbers or both single letters)"
        )
    out: list[str] = []
    for item in seq:
        out.extend(_expand_range(head + item + tail, where))
    return out


def _expand_host(pattern: str, where: str) -> tuple[list[str], int | None]:
    """Host names and the port a host entry names: `gpu[1:4]`, `gpu1:2222`, `[fe80::1]:22`."""
    if _is_ip(pattern):
        return [pattern], None
    bracketed = _BRACKETED_V6.fullmatch(pattern)
    if bracketed and _is_ip(bracketed.group(1)):
        return [bracketed.group(1)], _parse_port(bracketed.group(2), pattern, where)
    name, port = pattern, None
    outside = re.sub(r"\[[^\]]*\]", "", pattern)  # colons inside [1:4] belong to the range
    if ":" in outside:
        name, _, port_text = pattern.rpartition(":")
        if ":" in re.sub(r"\[[^\]]*\]", "", name) or not port_text.isdigit():
            raise InventoryError(
                f"{where}: bad host name {pattern!r} (a ':' must be followed by a port number)"
            )
        port = _parse_port(port_text, pattern, where)
    names = _expand_range(name, where)
    for host in names:
        if not host or _BAD_NAME_CHARS.search(host):
            raise InventoryError(f"{where}: bad host name {host!r}")
    return names, port


def _parse_port(text: str | None, token: str, where: str) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InventoryError(f"{where}: bad port {text!r} in {token!r} (expected 1-65535)")
    return int(text)


def _check_group_name(name: str, where: str) -> None:
    if not name or _BAD_NAME_CHARS.search(name) or ":" in name:
        raise InventoryError(f"{where}: bad group name {name!r}")


# --------------------------------------------------------------------------- YAML


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_duplicate_keys(node: yaml.MappingNode, display: str) -> None:
    """A key written twice in one mapping is an error naming both lines (PyYAML, like Ansible
    by default, would silently keep the last). `<<:` merge keys are not duplicates: keys
    written beside them override the merged ones by design."""
    first: dict[tuple[str, str], yaml.Node] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        ident = (key_node.tag, key_node.value)
        if ident in first:
            raise InventoryError(
                f"{display}:{key_node.start_mark.line + 1}: duplicate key {key_node.value!r}"
                f" (first at line {first[ident].start_mark.line + 1})"
            )
        first[ident] = key_node


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in every mapping it constructs."""

    display = ""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        _check_duplicate_keys(node, self.display)
        return super().construct_mapping(node, deep=deep)


class _YamlDoc:
    """One composed YAML document: nodes carry line marks, values are built on demand."""

    def __init__(self, path: Path, display: str) -> None:
        self.display = display
        text = _read_text(path)
        if path.suffix == ".json":
            # Valid JSON has tabs only between tokens, where YAML refuses them.
            text = text.replace("\t", " ")
        self.loader = _Loader(text)
        self.loader.display = display
        try:
            self.root: yaml.Node | None = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise InventoryError(_yaml_error(display, exc)) from None
        except yaml.YAMLError as exc:
            raise InventoryError(f"{display}: YAML error: {exc}") from None

    def close(self) -> None:
        self.loader.dispose()

    def line(self, node: yaml.Node) -> str:
        return f"{self.display}:{node.start_mark.line + 1}"

    def value(self, node: yaml.Node) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise InventoryError(_yaml_error(self.display, exc)) from None

    def pairs(self, node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
        _check_duplicate_keys(node, self.display)
        try:
            self.loader.flatten_mapping(node)  # resolves `<<:` merge keys in place
        except yaml.MarkedYAMLError as exc:
            raise InventoryError(_yaml_error(self.display, exc)) from None
        return list(node.value)

    def key(self, node: yaml.Node, keypath: str, what: str) -> str:
        if isinstance(node, yaml.ScalarNode) and node.tag == _STR_TAG and node.value:
            return str(node.value)
        raise InventoryError(
            f"{self.line(node)}: {keypath}: {what} must be a string, got {self.describe(node)}"
        )

    def describe(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        if node.tag == _NULL_TAG:
            return "nothing"
        value = self.value(node)
        return f"{type(value).__name__} {value!r}"


def _yaml_error(display: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    line = f":{mark.line + 1}" if mark is not None else ""
    problem = exc.problem or "syntax error"
    context = f" ({exc.context})" if exc.context else ""
    return f"{display}{line}: YAML syntax error: {problem}{context}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{_display_path(path)}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise InventoryError(f"{_display_path(path)}: cannot read: {exc.strerror}") from None


class _YamlInventory:
    """Walks a YAML inventory document into a `_Raw`."""

    def __init__(self, raw: _Raw, path: Path, display: str) -> None:
        self.raw = raw
        self.display = display
        self.doc = _YamlDoc(path, display)

    def parse(self) -> None:
        root = self.doc.root
        if root is None:
            return
        if not isinstance(root, yaml.MappingNode):
            raise InventoryError(
                f"{self.doc.line(root)}: expected a mapping of groups at the top (e.g. 'all:'),"
                f" got {self.doc.describe(root)}"
            )
        for key_node, value_node in self.doc.pairs(root):
            if (
                isinstance(key_node, yaml.ScalarNode)
                and key_node.value == "plugin"
                and self.doc.value(value_node)
            ):
                raise InventoryError(
                    f"{self.doc.line(key_node)}: plugin: this is an inventory plugin's"
                    " configuration, not an inventory (only static YAML and INI inventories"
                    " are read)"
                )
        for key_node, value_node in self.doc.pairs(root):
            name = self.doc.key(key_node, "(top)", "group name")
            _check_group_name(name, f"{self.doc.line(key_node)}: {name}")
            self.group(name, value_node, name)
        self.doc.close()

    def _section(
        self, node: yaml.Node, keypath: str, expected: str
    ) -> list[tuple[yaml.Node, yaml.Node]]:
        """The entries of a group's hosts/children/vars. As in Ansible, a single string is
        shorthand for a one-entry mapping with an empty value (`hosts: gpu1`)."""
        if isinstance(node, yaml.ScalarNode) and node.tag == _STR_TAG:
            empty = yaml.ScalarNode(_NULL_TAG, "", node.start_mark, node.end_mark)
            return [(node, empty)]
        mapping = self._mapping(node, keypath, expected)
        return [] if mapping is None else self.doc.pairs(mapping)

    def _mapping(self, node: yaml.Node, keypath: str, expected: str) -> yaml.MappingNode | None:
        """The node as a mapping; None for an empty value; an error for anything else."""
        if isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG:
            return None
        if not isinstance(node, yaml.MappingNode):
            raise InventoryError(
                f"{self.doc.line(node)}: {keypath}: expected {expected},"
                f" got {self.doc.describe(node)}"
            )
        return node

    def group(self, name: str, node: yaml.Node, keypath: str) -> None:
        self.raw.add_group(name)
        mapping = self._mapping(node, keypath, "a mapping with hosts/children/vars")
        if mapping is None:
            return
        for key_node, value_node in self.doc.pairs(mapping):
            key = self.doc.key(key_node, keypath, "group key")
            sub = f"{keypath}.{key}"
            if key == "hosts":
                self.hosts(name, value_node, sub)
            elif key == "children":
                self.children(name, value_node, sub)
            elif key == "vars":
                self.vars(name, value_node, sub)
            else:
                raise InventoryError(
                    f"{self.doc.line(key_node)}: {sub}: unknown key {key!r} in group {name!r}"
                    f" (allowed: {', '.join(GROUP_KEYS)})"
                )

    def hosts(self, group: str, node: yaml.Node, keypath: str) -> None:
        for key_node, value_node in self._section(node, keypath, "a mapping of host names"):
            pattern = self.doc.key(key_node, keypath, "host name")
            host_path = f"{keypath}.{pattern}"
            names, port = _expand_host(pattern, f"{self.doc.line(key_node)}: {host_path}")
            for name in names:
                self.raw.add_host(group, name)
            if port is not None:
                for name in names:
                    origin = self._host_origin(name, key_node, f"{host_path}.ansible_port")
                    self.raw.set_host_var(name, "ansible_port", port, origin)
            host_vars = self._mapping(value_node, host_path, "a mapping of host variables")
            if host_vars is None:
                continue
            for var_node, val_node in self.doc.pairs(host_vars):
                var = self.doc.key(var_node, host_path, "variable name")
                value = self.doc.value(val_node)
                for name in names:
                    origin = self._host_origin(name, var_node, f"{host_path}.{var}")
                    # A range shares one value; copies keep hosts independent.
                    self.raw.set_host_var(name, var, copy.deepcopy(value), origin)

    def _host_origin(self, host: str, node: yaml.Node, keypath: str) -> _Origin:
        return _Origin(f"{self.display}: host {host}", f"{self.doc.line(node)}: {keypath}")

    def children(self, parent: str, node: yaml.Node, keypath: str) -> None:
        for key_node, value_node in self._section(node, keypath, "a mapping of group names"):
            child = self.doc.key(key_node, keypath, "group name")
            where = f"{self.doc.line(key_node)}: {keypath}.{child}"
            _check_group_name(child, where)
            self.raw.add_child(parent, child, where)
            self.group(child, value_node, f"{keypath}.{child}")

    def vars(self, group: str, node: yaml.Node, keypath: str) -> None:
        for key_node, value_node in self._section(node, keypath, "a mapping of variables"):
            var = self.doc.key(key_node, keypath, "variable name")
            origin = _Origin(
                f"{self.display}: group {group}", f"{self.doc.line(key_node)}: {keypath}.{var}"
            )
            self.raw.set_group_var(group, var, self.doc.value(value_node), origin)


def _load_vars_file(path: Path) -> list[tuple[str, Any, _Origin]]:
    """The variables of one group_vars/host_vars file, in file order."""
    display = _display_path(path)
    doc = _YamlDoc(path, display)
    root = doc.root
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise InventoryError(
            f"{doc.line(root)}: expected a mapping of variables, got {doc.describe(root)}"
        )
    out = []
    for key_node, value_node in doc.pairs(root):
        var = doc.key(key_node, "(top)", "variable name")
        origin = _Origin(display, f"{doc.line(key_node)}: {var}")
        value = doc.value(value_node)
        _check_var(var, value, origin)
        out.append((var, value, origin))
    doc.close()
    return out


def _vars_files(base: Path, name: str) -> list[Path]:
    """group_vars/NAME{,.json,.yaml,.yml} in name order, then the files of a NAME/ directory."""
    found = [base / (name + ext) for ext in VARS_EXTENSIONS]
    files = sorted((p for p in found if p.is_file()), key=lambda p: p.name)
    if (base / name).is_dir():
        files.extend(_dir_files(base / name))
    return files


def _dir_files(directory: Path) -> list[Path]:
    out: list[Path] = []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):  # hidden files, backups
            continue
        if entry.is_dir():
            out.extend(_dir_files(entry))
        elif entry.suffix in VARS_EXTENSIONS:
            out.append(entry)
    return out


def _load_vars_dir(base: Path, name: str) -> _Vars:
    merged: _Vars = {}
    for path in _vars_files(base, name):
        for var, value, origin in _load_vars_file(path):
            merged[var] = (value, origin)
    return merged


# --------------------------------------------------------------------------- INI


def _ini_value(text: str, where: str) -> Any:
    """A value in an INI inventory (host line or [group:vars]) as Ansible's INI plugin reads it
    (`_parse_value`): a Python literal when `ast.literal_eval` takes it, else the text; tuples
    and sets become lists, complex numbers and `...` their text, bytes their decoded text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    except (TypeError, MemoryError, RecursionError) as exc:
        # Ansible fails the whole file here too ("Failed to parse inventory").
        raise InventoryError(f"{where}: cannot read value {text!r} ({exc})") from None
    return _ini_coerce(value, where)


def _ini_coerce(value: Any, where: str) -> Any:
    if isinstance(value, (list, tuple, set)):
        return [_ini_coerce(item, where) for item in value]
    if isinstance(value, dict):
        return {key: _ini_coerce(item, where) for key, item in value.items()}
    if value is Ellipsis:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise InventoryError(f"{where}: value {value!r} is not UTF-8") from None
    return value


@dataclass
class _Pending:
    """A group named before its own section, as Ansible's INI plugin tracks it."""

    state: str  # "vars" (a [g:vars] header) or "children" (a line in [p:children])
    where: str
    parents: list[tuple[str, str]] = field(default_factory=list)  # (parent, where)


def _parse_ini(raw: _Raw, path: Path, display: str) -> None:
    """Ansible's INI plugin: a group is created by its [g] / [g:children] / [g:vars] header; a
    child named before its group exists is linked when its section appears (so a parent's
    children are in the order their sections appear, as in Ansible)."""
    group, state = "ungrouped", "hosts"
    pending: dict[str, _Pending] = {}

    def link_pending(name: str) -> None:
        entry = pending.pop(name)
        for parent, where in entry.parents:
            raw.add_child(parent, name, where)
            if parent in pending and pending[parent].state == "children":
                link_pending(parent)

    for lineno, text in enumerate(_read_text(path).splitlines(), 1):
        line = text.strip()
        if not line or line[0] in "#;":
            continue
        where = f"{display}:{lineno}"
        if line.startswith("["):
            match = _INI_SECTION.match(line)
            if not match:
                raise InventoryError(
                    f"{where}: bad section header {line!r}"
                    " (expected [group], [group:vars] or [group:children])"
                )
            group, state = match.group(1), match.group(2) or "hosts"
            if state not in ("hosts", "vars", "children"):
                raise InventoryError(
                    f"{where}: [{group}:{state}]: unknown section type {state!r}"
                    " (allowed: [group], [group:vars], [group:children])"
                )
            _check_group_name(group, f"{where}: [{group}]")
            if group not in raw.groups:
                if state == "vars" and group not in pending:
                    pending[group] = _Pending("vars", f"{where}: [{group}:vars]")
                raw.add_group(group)
            if group in pending and state != "vars":
                if pending[group].state == "children":
                    link_pending(group)
                else:
                    del pending[group]
            continue
        section = f"[{group}]" if state == "hosts" else f"[{group}:{state}]"
        if state == "hosts":
            _parse_ini_host(raw, group, line, f"{where}: {section}", display)
        elif state == "vars":
            key, sep, value = (part.strip() for part in line.partition("="))
            if not sep or not key or re.search(r"\s", key):
                raise InventoryError(f"{where}: {section}: expected key=value, got {line!r}")
            origin = _Origin(f"{display}: group {group}", f"{where}: {section} {key}")
            # The same reading as host-line values (Ansible's `_parse_value`), minus shlex:
            # port=6000 is an int, l=[1, 2] a list, f=False a bool, "x" the string x.
            raw.set_group_var(group, key, _ini_value(value, origin.where), origin)
        else:
            match = _INI_GROUP_LINE.match(line)
            if not match:
                raise InventoryError(
                    f"{where}: {section}: expected one group name per line, got {line!r}"
                )
            child = match.group(1)
            _check_group_name(child, f"{where}: {section}")
            child_where = f"{where}: {section} {child}"
            if child in raw.groups:
                raw.add_child(group, child, child_where)
            else:
                pending.setdefault(child, _Pending("children", child_where)).parents.append(
                    (group, child_where)
                )
    for name, entry in pending.items():
        raise InventoryError(
            f"{entry.where}: group {name!r} is never declared (add a [{name}] section)"
        )


def _parse_ini_host(raw: _Raw, group: str, line: str, where: str, display: str) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise InventoryError(f"{where}: cannot parse host line ({exc}): {line!r}") from None
    if not tokens:
        return
    pattern = tokens[0]
    if "=" in pattern:
        raise InventoryError(
            f"{where}: expected a host name first, got {pattern!r}"
            f" (variables for the whole group go under [{group}:vars])"
        )
    names, port = _expand_host(pattern, f"{where} {pattern}")
    if "---" in names:
        raise InventoryError(f"{where}: host '---' is a sign this is a YAML file")
    for name in names:
        raw.add_host(group, name)
    assignments: list[tuple[str, Any]] = [] if port is None else [("ansible_port", port)]
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise InventoryError(f"{where} {pattern}: expected key=value, got {token!r}")
        assignments.append((key, _ini_value(value, f"{where} {pattern} {key}")))
    for name in names:
        for key, value in assignments:
            origin = _Origin(f"{display}: host {name}", f"{where} {pattern} {key}")
            raw.set_host_var(name, key, copy.deepcopy(value), origin)


def _looks_like_ini(path: Path) -> bool:
    """Whether the file looks meant as INI (its first real line is not YAML-like); only orders
    the two parsers' errors when neither reads the file."""
    for text in _read_text(path).splitlines():
        line = text.strip()
        if not line or line[0] in "#;":
            continue
        if _INI_SECTION.match(line):
            return True
        if line.startswith(("---", "{", "- ")) or re.match(r"^[^\s=]+:(\s|$)", line):
            return False
        return True
    return False


# --------------------------------------------------------------------------- resolution


def _check_cycles(raw: _Raw) -> None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for child in raw.groups[name].children:
            if state.get(child) == 1:
                cycle = stack[stack.index(child) :] + [child]
                where = raw.groups[name].child_where[child]
                raise InventoryError(f"{where}: child group cycle: {' -> '.join(cycle)}")
            if child not in state:
                visit(child)
        stack.pop()
        state[name] = 2

    for name in raw.groups:
        if name not in state:
            visit(name)


def _resolve(raw: _Raw, base: Path | None) -> tuple[dict[str, Host], dict[str, Group], _Vars]:
    """Apply Ansible's group tree rules and variable precedence; returns hosts, groups and the
    variables every host gets (the `all` layers, for ad hoc and implicit hosts)."""
    parents: dict[str, list[str]] = {name: [] for name in raw.groups}
    for group in raw.groups.values():
        for child in group.children:
            parents[child].append(group.name)
    _check_cycles(raw)
    for name in raw.groups:
        if name != "all" and not parents[name]:
            raw.groups["all"].children.append(name)
            parents[name].append("all")

    depth: dict[str, int] = {"all": 0}

    def depth_of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max(depth_of(parent) for parent in parents[name])
        return depth[name]

    # Ansible puts a host in `ungrouped` exactly when it is in no group besides `all`.
    ungrouped = raw.groups["ungrouped"]
    for host in raw.hosts.values():
        if set(host.groups) - {"all", "ungrouped"}:
            if "ungrouped" in host.groups:
                host.groups.remove("ungrouped")
                ungrouped.hosts.remove(host.name)
        elif "ungrouped" not in host.groups:
            host.groups.append("ungrouped")
            ungrouped.hosts.append(host.name)

    def ancestors(names: list[str]) -> set[str]:
        seen = {"all"}
        todo = list(names)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(parents[name])
        return seen

    def order(names: set[str]) -> list[str]:
        return sorted(names, key=lambda n: (depth_of(n), raw.groups[n].priority, n))

    file_vars: dict[str, _Vars] = {}
    if base is not None:
        for name in raw.groups:
            file_vars[name] = _load_vars_dir(base / "group_vars", name)

    groups: dict[str, Group] = {}
    for name, rg in raw.groups.items():
        merged = {k: v for k, (v, _) in rg.vars.items()}
        merged.update({k: v for k, (v, _) in file_vars.get(name, {}).items()})
        groups[name] = Group(
            name,
            [],
            list(rg.children),
            merged,
            priority=rg.priority,
            depth=depth_of(name),
            direct_hosts=list(rg.hosts),
        )

    hosts: dict[str, Host] = {}
    for rh in raw.hosts.values():
        member_of = order(ancestors(rh.groups))
        layers: list[_Vars] = [raw.groups[g].vars for g in member_of]
        layers += [file_vars.get(g, {}) for g in member_of]
        layers.append(rh.vars)
        if base is not None:
            layers.append(_load_vars_dir(base / "host_vars", rh.name))
        winners = _merge(layers)
        check_host_vars(rh.name, {k: (v, o.where) for k, (v, o) in winners.items()})
        values = {k: copy.deepcopy(v) for k, (v, _) in winners.items()}
        sources = {k: o.source for k, (_, o) in winners.items()}
        hosts[rh.name] = Host(rh.name, values, sorted(member_of), sources)
    for name, resolved in groups.items():
        resolved.hosts = _group_hosts(name, groups)
    all_vars = dict(raw.groups["all"].vars)
    all_vars.update(file_vars.get("all", {}))
    # Hosts outside the inventory (ad hoc, `local`) get exactly these.
    check_host_vars("(every host)", {k: (v, o.where) for k, (v, o) in all_vars.items()})
    return hosts, groups, all_vars


def _merge(layers: list[_Vars]) -> _Vars:
    """Top-level replace, as Ansible's default hash_behaviour; later layers win."""
    winners: _Vars = {}
    for layer in layers:
        winners.update(layer)
    return winners


def _descendants(name: str, groups: dict[str, Group]) -> list[str]:
    """The group and its descendants in the order Ansible's `Group.get_descendants(
    preserve_ordering=True)` gives: the group, its children, then level by level.

    Ansible walks each level as a Python set of group objects, so the order among groups of
    the same level below the first depends on object addresses; here it is the order in which
    they were reached (the order they are written in), which is what Ansible gives whenever at
    most one group per level has children.
    """
    ordered = [name, *groups[name].children]
    seen: set[str] = set()
    level = list(dict.fromkeys(ordered))
    while level:
        seen.update(level)
        reached: list[str] = []
        for group in level:
            for child in groups[group].children:
                if child not in seen:
                    ordered.append(child)
                    reached.append(child)
        level = list(dict.fromkeys(reached))
    return list(dict.fromkeys(ordered))


def _group_hosts(name: str, groups: dict[str, Group]) -> list[str]:
    """Ansible's `Group.get_hosts()`: direct hosts of each descendant group in walk order."""
    out: dict[str, None] = {}
    for group in _descendants(name, groups):
        out.update(dict.fromkeys(groups[group].direct_hosts))
    return list(out)


# --------------------------------------------------------------------------- patterns


def _split_pattern(text: str) -> list[str]:
    """Terms of a --host pattern: commas separate; so does ':' unless a port follows it."""
    terms: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        body = piece.lstrip("!&")
        address = body.rpartition("@")[2]
        bracketed = _BRACKETED_V6.fullmatch(address)
        if _is_ip(address) or (bracketed and _is_ip(bracketed.group(1))):
            terms.append(piece)  # IPv6 colons are not separators
            continue
        out: list[str] = []
        for token in _PATTERN_TOKEN.findall(piece):
            if token.isdigit() and out and ":" not in out[-1]:
                out[-1] += ":" + token  # host:port, not a union with a group named 22
            else:
                out.append(token)
        terms.extend(out)
    return terms


def _parse_adhoc(term: str) -> tuple[str | None, str, int | None] | None:
    """(user, address, port) for an ad hoc host token, None when the token does not look like
    one (no '@', no ':port', not an IP address)."""
    user: str | None = None
    rest = term
    if "@" in term:
        user, _, rest = term.rpartition("@")
        if not user or not rest:
            raise InventoryError(f"bad ad hoc host {term!r} in --host (expected user@addr[:port])")
    port_text: str | None = None
    bracketed = _BRACKETED_V6.fullmatch(rest)
    if bracketed and _is_ip(bracketed.group(1)):
        addr, port_text = bracketed.group(1), bracketed.group(2)
    elif _is_ip(rest) or ":" not in rest:
        addr = rest
    else:
        addr, _, port_text = rest.rpartition(":")
    if user is None and port_text is None and not _is_ip(addr):
        return None
    if not addr or _BAD_NAME_CHARS.search(addr) or (":" in addr and not _is_ip(addr)):
        raise InventoryError(f"bad ad hoc host {term!r} in --host (expected user@addr[:port])")
    port = _parse_port(port_text, term, "--host")
    return user, addr, port


def _close_matches(word: str, candidates: list[str]) -> list[str]:
    """Up to three close names, best first, ties in inventory order."""
    scored = []
    for index, name in enumerate(candidates):
        ratio = difflib.SequenceMatcher(None, word, name).ratio()
        if ratio >= 0.6:
            scored.append((-ratio, index, name))
    return [name for _, _, name in sorted(scored)[:3]]


# Ansible's PATTERN_WITH_SUBSCRIPT (inventory/manager.py): `name[3]`, `name[-1]`, `name[1:3]`,
# `name[1:]`, and the removed-but-still-read `name[1-3]`.
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")


def _split_subscript(term: str) -> tuple[str, tuple[int, int | None] | None]:
    """(expression, (start, end or None)) as Ansible's `_split_subscript`; a regex term keeps
    its brackets (they are part of the regex)."""
    if term[0] == "~":
        return term, None
    match = _SUBSCRIPT.match(term)
    if not match:
        return term, None
    expr, index, start, _, end = match.groups()
    if index:
        return expr, (int(index), None)
    return expr, (int(start), int(end) if end else -1)


def _apply_subscript(hosts: list[Host], subscript: tuple[int, int | None], term: str) -> list[Host]:
    """Ansible's `_apply_subscript`: [i] one host (an error when out of range), [a:b] the hosts
    a to b inclusive, [a:] from a to the end."""
    start, end = subscript
    if end:
        if end == -1:
            end = len(hosts) - 1
        return hosts[start : end + 1]
    try:
        return [hosts[start]]
    except IndexError:
        raise InventoryError(
            f"host pattern {term!r} in --host: subscript [{start}] is out of range"
            f" ({len(hosts)} hosts match)"
        ) from None


def _name_matcher(expr: str) -> Any:
    """A predicate on names: `~regex` (re.match: anchored at the start only, as in Ansible), or a
    shell glob (fnmatch, case-sensitive; a plain name matches only itself)."""
    try:
        if expr[0] == "~":
            return re.compile(expr[1:]).match
        return re.compile(fnmatch.translate(expr)).match
    except re.error as exc:
        raise InventoryError(f"bad host pattern {expr!r} in --host ({exc})") from None


class Inventory:
    """Resolved hosts and groups of one inventory file (or none)."""

    def __init__(
        self,
        path: Path | None,
        hosts: dict[str, Host],
        groups: dict[str, Group],
        all_vars: _Vars | None = None,
    ) -> None:
        self.path = path
        self.hosts = hosts
        self.groups = groups
        self._all_vars: _Vars = all_vars or {}

    def __repr__(self) -> str:
        return f"Inventory(path={self.path!r}, hosts={list(self.hosts)!r})"

    def select(self, pattern: str) -> list[Host]:
        """Resolve a --host pattern into hosts, in Ansible's order, without duplicates.

        Forms: a host or group name, `all`/`*`, globs (`gpu*`, on host and group names),
        regexes (`~gpu0[12]`, matched from the start of the name), subscripts (`gpus[0]`,
        `gpus[-1]`, `gpus[0:1]`, `gpus[1:]`), `a,b` or `a:b` (union), `a:&b` (intersection),
        `a:!b` (exclusion), `local` (this machine) and ad hoc hosts (`user@addr:port`,
        `user@addr`, `addr:port`, an IP address). As in Ansible, unions come first in the order
        written, then intersections, then exclusions; a group gives its hosts in Ansible's
        `get_hosts()` order. Unlike Ansible, a term that matches nothing is an error.
        """
        text = (pattern or "").strip()
        terms = _split_pattern(text)
        if not terms:
            raise InventoryError(
                f"empty host pattern in --host {pattern!r} (give a host, a group, 'all' or 'local')"
            )
        regular = [t for t in terms if t[0] not in "!&"] or ["all"]
        chosen: list[Host] = []
        for term in regular:
            have = {host.name for host in chosen}
            chosen.extend(host for host in self._match(term) if host.name not in have)
        for term in (t for t in terms if t[0] == "&"):
            keep = {host.name for host in self._match(term[1:])}
            chosen = [host for host in chosen if host.name in keep]
        for term in (t for t in terms if t[0] == "!"):
            drop = {host.name for host in self._match(term[1:])}
            chosen = [host for host in chosen if host.name not in drop]
        if not chosen:
            raise InventoryError(f"host pattern {text!r} in --host matches no host")
        return chosen

    def _match(self, term: str) -> list[Host]:
        """One term, as Ansible's `_match_one_pattern`, then this tool's extras (`local`, ad
        hoc hosts) for what the inventory does not name; nothing found is an error."""
        if not term:
            raise InventoryError("empty term after '!' or '&' in --host")
        if term in self.hosts:
            return [self.hosts[term]]
        expr, subscript = _split_subscript(term)
        matcher = _name_matcher(expr)
        groups = [name for name in self.groups if matcher(name)]
        found = [self.hosts[h] for g in groups for h in self.groups[g].hosts]
        if not groups or expr[0] == "~" or any(c in expr for c in ".?*["):
            found += [host for name, host in self.hosts.items() if matcher(name)]
        if found:
            if subscript is not None:
                found = _apply_subscript(found, subscript, term)
            return list({host.name: host for host in found}.values())
        if groups:
            return []  # an empty group: nothing to add, nothing wrong
        if expr == "local" and subscript is None:
            return [self._extra_host("local", {"ansible_connection": "local"}, "implicit local")]
        if expr[0] == "~" or subscript is not None:
            raise InventoryError(f"host pattern {term!r} in --host matches no host or group")
        globbing = any(char in term for char in _GLOB_CHARS)
        if not globbing or "@" in term or term.startswith("["):
            adhoc = _parse_adhoc(term)
            if adhoc is not None:
                user, addr, port = adhoc
                conn: dict[str, Any] = {"ansible_host": addr}
                if port is not None:
                    conn["ansible_port"] = port
                if user is not None:
                    conn["ansible_user"] = user
                return [self._extra_host(term, conn, f"--host {term}")]
        if globbing:
            raise InventoryError(f"host pattern {term!r} in --host matches no host or group")
        candidates = list(dict.fromkeys([*self.hosts, *self.groups]))
        close = _close_matches(term, candidates)
        if close:
            hint = f"did you mean: {', '.join(close)}?"
        else:
            where = f"not in {_display_path(self.path)}" if self.path else "no inventory given"
            hint = f"{where}; for a machine outside the inventory give user@addr or addr:port"
        raise InventoryError(f"unknown host or group {term!r} in --host ({hint})")

    def _extra_host(self, name: str, conn: dict[str, Any], source: str) -> Host:
        """A host outside the inventory: the `all` variables, then its connection vars."""
        values = {k: copy.deepcopy(v) for k, (v, _) in self._all_vars.items()}
        sources = {k: o.source for k, (_, o) in self._all_vars.items()}
        for key, value in conn.items():
            values[key] = value
            sources[key] = source
        return Host(name, values, ["all"], sources)

    def to_ansible_list(self) -> dict[str, Any]:
        """The document `ansible-inventory --list` prints for this inventory (without its
        `_meta.profile`): groups with their direct hosts and children, groups with neither
        left out (they still appear among their parent's children), and `_meta.hostvars`
        with each host's merged variables (hosts without any left out)."""
        out: dict[str, Any] = {}
        seen: set[str] = set()

        def visit(name: str) -> None:
            group = self.groups[name]
            entry: dict[str, Any] = {}
            if name != "all" and group.direct_hosts:
                entry["hosts"] = list(group.direct_hosts)
            if group.children:
                entry["children"] = list(group.children)
            for child in group.children:
                if child not in seen:
                    visit(child)
                    seen.add(child)
            if entry:
                out[name] = entry

        visit("all")
        hostvars = {
            name: copy.deepcopy(host.vars)
            for name in self.groups["all"].hosts
            if (host := self.hosts[name]).vars
        }
        return {"_meta": {"hostvars": hostvars}, **out}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view for `invoke inventory --json`."""
        return {
            "hosts": {
                name: {
                    "groups": list(host.groups),
                    "vars": dict(host.vars),
                    "var_sources": dict(host.var_sources),
                }
                for name, host in self.hosts.items()
            },
            "groups": {
                name: {
                    "hosts": list(group.hosts),
                    "children": list(group.children),
                    "vars": dict(group.vars),
                }
                for name, group in self.groups.items()
            },
        }


def load_inventory(path: str | os.PathLike[str] | None) -> Inventory:
    """Read an inventory file (YAML/JSON or INI, detected as Ansible does) and the
    group_vars/ and host_vars/ directories beside it. None gives an empty inventory, where only
    `local` and ad hoc hosts resolve."""
    raw = _Raw()
    if path is None:
        hosts, groups, all_vars = _resolve(raw, None)
        return Inventory(None, hosts, groups, all_vars)
    file = Path(path)
    display = _display_path(file)
    if not file.exists():
        raise InventoryError(f"{display}: inventory file does not exist")
    if file.is_dir():
        raise InventoryError(f"{display}: is a directory; give the inventory file inside it")
    raw = _parse_file(file, display)
    hosts, groups, all_vars = _resolve(raw, file.parent)
    return Inventory(file, hosts, groups, all_vars)


def _parse_file(file: Path, display: str) -> _Raw:
    """Try the parsers Ansible enables for a file, in its order, and keep the first that reads
    it: YAML for `.yaml`, `.yml`, `.json` and extension-less files, then INI for anything but
    `.toml` (so `hosts`, `inventory`, `*.inventory`, `*.ini` are INI unless they hold a YAML
    mapping). When none reads it, the error says what each parser said, the one the file looks
    meant for first."""
    ext = os.path.splitext(file.name)[1]  # case-sensitive, like Ansible's yaml_extensions
    if ext == ".toml":
        raise InventoryError(
            f"{display}: TOML inventories are not supported (use YAML or INI; Ansible's"
            " `toml` inventory plugin reads this format)"
        )
    failures: list[tuple[str, InventoryError]] = []
    yaml_mapping = False
    if ext in YAML_EXTENSIONS:
        raw = _Raw()
        reader: _YamlInventory | None = None
        try:
            reader = _YamlInventory(raw, file, display)
            reader.parse()
            return raw
        except InventoryError as exc:
            failures.append(("YAML", exc))
            yaml_mapping = reader is not None and isinstance(reader.doc.root, yaml.MappingNode)
    raw = _Raw()
    try:
        _parse_ini(raw, file, display)
        return raw
    except InventoryError as exc:
        failures.append(("INI", exc))
    if len(failures) == 1 or yaml_mapping:
        # A YAML mapping is never INI (its first line is `name:`), so INI's word is noise.
        raise failures[0][1]
    yaml_error, ini_error = failures[0][1], failures[1][1]
    if ext in (".yaml", ".yml", ".json") or not _looks_like_ini(file):
        first, second = ("YAML", yaml_error), ("INI", ini_error)
    else:
        first, second = ("INI", ini_error), ("YAML", yaml_error)
    raise InventoryError(
        f"{first[1]} (read as {first[0]}; read as {second[0]}: {_strip_display(second[1], display)})"
    )


def _strip_display(error: InventoryError, display: str) -> str:
    """The error without its leading file name (the first error already names the file)."""
    text = str(error)
    return text[len(display) :].lstrip(":") if text.startswith(display) else text

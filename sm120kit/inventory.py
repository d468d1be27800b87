"""Ansible-compatible inventories: YAML or INI files, group_vars/ and host_vars/, host patterns.

`load_inventory` reads one inventory file (YAML, JSON or INI) plus the `group_vars/` and
`host_vars/` directories beside it, applies Ansible's variable precedence and returns an
`Inventory` whose `select` resolves a ``--host`` pattern. Every mistake in an inventory raises ONE
`InventoryError` whose message starts with ``file:line: key.path:``.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sm120kit.errors import InventoryError
from sm120kit.host import Host

__all__ = ["Group", "Inventory", "load_inventory"]

#: The only keys a YAML group may hold.
GROUP_KEYS = ("hosts", "children", "vars")
#: Extensions of the files read from group_vars/ and host_vars/ ("" = bare NAME).
VARS_EXTENSIONS = ("", ".yaml", ".yml", ".json")
#: Extensions that always mean the INI format.
INI_EXTENSIONS = (".ini", ".cfg")

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

    `hosts` lists direct and transitive members in inventory order; `children` the direct child
    groups; `vars` the group's own variables (inventory file, then group_vars/NAME on top), not
    the inherited ones.
    """

    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    #: `ansible_group_priority` (inventory file only, as in Ansible); orders same-depth groups.
    priority: int = 1
    #: Distance from `all` along the longest parent chain; parents merge before children.
    depth: int = 0


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


class _YamlDoc:
    """One composed YAML document: nodes carry line marks, values are built on demand."""

    def __init__(self, path: Path, display: str) -> None:
        self.display = display
        text = _read_text(path)
        if path.suffix == ".json":
            # Valid JSON has tabs only between tokens, where YAML refuses them.
            text = text.replace("\t", " ")
        self.loader = yaml.SafeLoader(text)
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
            name = self.doc.key(key_node, "(top)", "group name")
            _check_group_name(name, f"{self.doc.line(key_node)}: {name}")
            self.group(name, value_node, name)
        self.doc.close()

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
        mapping = self._mapping(node, keypath, "a mapping of host names")
        if mapping is None:
            return
        for key_node, value_node in self.doc.pairs(mapping):
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
        mapping = self._mapping(node, keypath, "a mapping of group names")
        if mapping is None:
            return
        for key_node, value_node in self.doc.pairs(mapping):
            child = self.doc.key(key_node, keypath, "group name")
            where = f"{self.doc.line(key_node)}: {keypath}.{child}"
            _check_group_name(child, where)
            self.raw.add_child(parent, child, where)
            self.group(child, value_node, f"{keypath}.{child}")

    def vars(self, group: str, node: yaml.Node, keypath: str) -> None:
        mapping = self._mapping(node, keypath, "a mapping of variables")
        if mapping is None:
            return
        for key_node, value_node in self.doc.pairs(mapping):
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


def _ini_value(text: str) -> Any:
    """An inline host var as Ansible reads it: a Python literal when it is one, else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _parse_ini(raw: _Raw, path: Path, display: str) -> None:
    group, state = "ungrouped", "hosts"
    declared = {"all", "ungrouped"}
    # Groups named by [x:children] lines or [x:vars] headers that no [x] section declared yet.
    pending: dict[str, str] = {}
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
            raw.add_group(group)
            if state == "vars":
                if group not in declared:
                    pending.setdefault(group, f"{where}: [{group}:vars]")
            else:
                declared.add(group)
                pending.pop(group, None)
            continue
        section = f"[{group}]" if state == "hosts" else f"[{group}:{state}]"
        if state == "hosts":
            _parse_ini_host(raw, group, line, f"{where}: {section}", display)
        elif state == "vars":
            key, sep, value = (part.strip() for part in line.partition("="))
            if not sep or not key or re.search(r"\s", key):
                raise InventoryError(f"{where}: {section}: expected key=value, got {line!r}")
            origin = _Origin(f"{display}: group {group}", f"{where}: {section} {key}")
            # Ansible reads [group:vars] values as strings (inline host vars are literals).
            raw.set_group_var(group, key, _unquote(value), origin)
        else:
            match = _INI_GROUP_LINE.match(line)
            if not match:
                raise InventoryError(
                    f"{where}: {section}: expected one group name per line, got {line!r}"
                )
            child = match.group(1)
            _check_group_name(child, f"{where}: {section}")
            raw.add_child(group, child, f"{where}: {section} {child}")
            if child not in declared:
                pending.setdefault(child, f"{where}: {section} {child}")
    if pending:
        name, where = next(iter(pending.items()))
        raise InventoryError(f"{where}: group {name!r} is never declared (add a [{name}] section)")


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
    for name in names:
        raw.add_host(group, name)
    assignments: list[tuple[str, Any]] = [] if port is None else [("ansible_port", port)]
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise InventoryError(f"{where} {pattern}: expected key=value, got {token!r}")
        assignments.append((key, _ini_value(value)))
    for name in names:
        for key, value in assignments:
            origin = _Origin(f"{display}: host {name}", f"{where} {pattern} {key}")
            raw.set_host_var(name, key, copy.deepcopy(value), origin)


def _looks_like_ini(path: Path) -> bool:
    """For a file without extension: INI unless its first real line looks like YAML."""
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
            name, [], list(rg.children), merged, priority=rg.priority, depth=depth_of(name)
        )

    hosts: dict[str, Host] = {}
    for rh in raw.hosts.values():
        member_of = order(ancestors(rh.groups))
        layers: list[_Vars] = [raw.groups[g].vars for g in member_of]
        layers += [file_vars.get(g, {}) for g in member_of]
        layers.append(rh.vars)
        if base is not None:
            layers.append(_load_vars_dir(base / "host_vars", rh.name))
        values, sources = _merge(layers)
        hosts[rh.name] = Host(rh.name, values, sorted(member_of), sources)
        for g in member_of:
            groups[g].hosts.append(rh.name)
    all_vars = dict(raw.groups["all"].vars)
    all_vars.update(file_vars.get("all", {}))
    return hosts, groups, all_vars


def _merge(layers: list[_Vars]) -> tuple[dict[str, Any], dict[str, str]]:
    """Top-level replace, as Ansible's default hash_behaviour; later layers win."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in layers:
        for key, (value, origin) in layer.items():
            values[key] = copy.deepcopy(value)
            sources[key] = origin.source
    return values, sources


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
        """Resolve a --host pattern into hosts, in inventory order, without duplicates.

        Forms: a host or group name, `all`/`*`, globs (`gpu*`, on host and group names),
        `a,b` or `a:b` (union), `a:&b` (intersection), `a:!b` (exclusion), `local` (this
        machine) and ad hoc hosts (`user@addr:port`, `user@addr`, `addr:port`, an IP address).
        """
        text = (pattern or "").strip()
        terms = _split_pattern(text)
        if not terms:
            raise InventoryError(
                f"empty host pattern in --host {pattern!r} (give a host, a group, 'all' or 'local')"
            )
        regular = [t for t in terms if t[0] not in "!&"] or ["all"]
        chosen: dict[str, Host] = {}
        for term in regular:
            for host in self._match(term):
                chosen.setdefault(host.name, host)
        for term in (t for t in terms if t[0] == "&"):
            keep = {host.name for host in self._match(term[1:])}
            chosen = {name: host for name, host in chosen.items() if name in keep}
        for term in (t for t in terms if t[0] == "!"):
            drop = {host.name for host in self._match(term[1:])}
            chosen = {name: host for name, host in chosen.items() if name not in drop}
        if not chosen:
            raise InventoryError(f"host pattern {text!r} in --host matches no host")
        rank = {name: index for index, name in enumerate(self.hosts)}
        # Stable sort: hosts outside the inventory keep the order they were named in.
        return sorted(chosen.values(), key=lambda host: rank.get(host.name, len(rank)))

    def _match(self, term: str) -> list[Host]:
        if not term:
            raise InventoryError("empty term after '!' or '&' in --host")
        if term in ("all", "*"):
            return list(self.hosts.values())
        if term in self.hosts:
            return [self.hosts[term]]
        if term in self.groups:
            return [self.hosts[name] for name in self.groups[term].hosts]
        if term == "local":
            return [self._extra_host("local", {"ansible_connection": "local"}, "implicit local")]
        globbing = any(char in term for char in _GLOB_CHARS)
        if globbing and "@" not in term and not term.startswith("["):
            return self._glob(term)
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
            return self._glob(term)
        candidates = list(dict.fromkeys([*self.hosts, *self.groups]))
        close = _close_matches(term, candidates)
        if close:
            hint = f"did you mean: {', '.join(close)}?"
        else:
            where = f"not in {_display_path(self.path)}" if self.path else "no inventory given"
            hint = f"{where}; for a machine outside the inventory give user@addr or addr:port"
        raise InventoryError(f"unknown host or group {term!r} in --host ({hint})")

    def _glob(self, term: str) -> list[Host]:
        names = {name for name in self.hosts if fnmatch.fnmatchcase(name, term)}
        for group in self.groups.values():
            if fnmatch.fnmatchcase(group.name, term):
                names.update(group.hosts)
        if not names:
            raise InventoryError(f"host pattern {term!r} in --host matches no host or group")
        return [host for name, host in self.hosts.items() if name in names]

    def _extra_host(self, name: str, conn: dict[str, Any], source: str) -> Host:
        """A host outside the inventory: the `all` variables, then its connection vars."""
        values, sources = _merge([self._all_vars])
        for key, value in conn.items():
            values[key] = value
            sources[key] = source
        return Host(name, values, ["all"], sources)

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
    """Read an inventory file (YAML/JSON, or INI by .ini/.cfg or INI-looking content) and the
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
    suffix = file.suffix.lower()
    if suffix in INI_EXTENSIONS or (not suffix and _looks_like_ini(file)):
        _parse_ini(raw, file, display)
    else:
        _YamlInventory(raw, file, display).parse()
    hosts, groups, all_vars = _resolve(raw, file.parent)
    return Inventory(file, hosts, groups, all_vars)

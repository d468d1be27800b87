"""Reading an inventory's files: YAML (and JSON) and INI inventories, and the group_vars/ and
host_vars/ files beside them, into the raw form of `sm120kit.inventory.raw`; every mistake one
`InventoryError` naming file, line and key. Part of `sm120kit.inventory.load`.
"""

from __future__ import annotations

import ast
import copy
import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sm120kit.errors import InventoryError
from sm120kit.inventory.raw import (
    _INI_GROUP_LINE,
    _INI_SECTION,
    _NULL_TAG,
    _STR_TAG,
    GROUP_KEYS,
    VARS_EXTENSIONS,
    _check_group_name,
    _check_var,
    _display_path,
    _expand_host,
    _Origin,
    _Raw,
    _Vars,
)

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
    if pattern == "---":
        raise InventoryError(f"{where}: host '---' is a sign this is a YAML file")
    names, port = _expand_host(pattern, f"{where} {pattern}")
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

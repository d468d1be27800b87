"""An inventory as its file says it, before groups and variables are resolved (`_Raw`), and
the checks every reader shares: variable values, host names and ranges, group names.

Part of `sm120kit.inventory.load` (its module docstring says what "as Ansible does" means here).
"""

from __future__ import annotations

import ipaddress
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import InventoryError
from sm120kit.inventory.host import unsafe_host_name

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
        problem = unsafe_host_name(host)
        if problem:
            raise InventoryError(f"{where}: bad host name {host[:80]!r}: {problem}")
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

"""Ansible-compatible inventories: YAML or INI files, group_vars/ and host_vars/, host patterns.

`load_inventory` reads one inventory file (YAML, JSON or INI) plus the `group_vars/` and
`host_vars/` directories beside it, applies Ansible's variable precedence and returns an
`Inventory` whose `select` resolves a ``--host`` pattern. Every mistake in an inventory raises ONE
`InventoryError` whose message starts with ``file:line: key.path:``.

What "as Ansible does" means here is pinned by tests/unit/test_ansible_compat.py against ansible-core
(`ansible-inventory --list`, `list_hosts`); the sources followed are ansible-core's
`plugins/inventory/ini.py` and `yaml.py`, `inventory/data.py`, `inventory/group.py` and
`inventory/manager.py`. Deliberate differences are listed in docs/inventory.md.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml

from sm120kit.errors import InventoryError
from sm120kit.inventory.files import _load_vars_dir, _looks_like_ini, _parse_ini, _YamlInventory
from sm120kit.inventory.host import Host, unsafe_host_name
from sm120kit.inventory.hostvars import check_host_vars
from sm120kit.inventory.patterns import (
    _apply_subscript,
    _close_matches,
    _name_matcher,
    _parse_adhoc,
    _split_pattern,
    _split_subscript,
)
from sm120kit.inventory.raw import _GLOB_CHARS, YAML_EXTENSIONS, Group, _display_path, _Raw, _Vars

__all__ = ["Group", "Inventory", "load_inventory"]


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
        problem = unsafe_host_name(name)
        if problem:
            raise InventoryError(f"{source}: bad host name {name[:80]!r}: {problem}")
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
    try:
        exists, is_dir = file.exists(), file.is_dir()
    except OSError as exc:  # ENAMETOOLONG, ELOOP: a path that cannot be looked up at all
        raise InventoryError(
            f"{display[:120]}: cannot read the inventory file: {exc.strerror}"
        ) from None
    if not exists:
        raise InventoryError(f"{display}: inventory file does not exist")
    if is_dir:
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

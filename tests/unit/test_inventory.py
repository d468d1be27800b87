"""Inventory loading (YAML, INI, group_vars/host_vars), precedence, and --host patterns."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sm120kit.errors import InventoryError
from sm120kit.inventory.host import Host
from sm120kit.inventory.load import Group, Inventory, load_inventory

DATA = Path(__file__).parent.parent / "data" / "inventory"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test from tmp_path so displayed paths are short and relative."""
    monkeypatch.chdir(tmp_path)


def write(rel: str, text: str) -> Path:
    """Write dedented text to a path relative to the current (tmp) directory."""
    path = Path(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load(rel: str, text: str) -> Inventory:
    return load_inventory(write(rel, text))


def error_of(rel: str, text: str, extra: dict[str, str] | None = None) -> str:
    path = write(rel, text)
    for other, body in (extra or {}).items():
        write(other, body)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def names(hosts: list[Host]) -> list[str]:
    return [host.name for host in hosts]


# A small cluster used by the pattern tests.
CLUSTER = """
all:
  vars:
    ansible_user: root
  hosts:
    builder:
  children:
    gpus:
      hosts:
        gpu1:
        gpu2:
        gpu3:
      children:
        rtx:
          hosts:
            gpu2:
            gpu3:
    cpus:
      hosts:
        cpu1:
"""


@pytest.fixture
def cluster() -> Inventory:
    write("inventory/group_vars/all.yaml", "work_root: /data\n")
    write("inventory/group_vars/gpus.yaml", "cuda: '13.0'\n")
    return load("inventory/hosts.yaml", CLUSTER)


# --------------------------------------------------------------------------- YAML structure


def test_yaml_nested_children_groups_and_membership(cluster: Inventory) -> None:
    assert list(cluster.hosts) == ["builder", "gpu1", "gpu2", "gpu3", "cpu1"]
    assert cluster.hosts["gpu2"].groups == ["all", "gpus", "rtx"]
    assert cluster.hosts["builder"].groups == ["all", "ungrouped"]
    assert cluster.groups["gpus"].hosts == ["gpu1", "gpu2", "gpu3"]  # direct + via rtx
    assert cluster.groups["gpus"].children == ["rtx"]
    assert cluster.groups["rtx"].depth == 2
    assert cluster.groups["all"].hosts == ["builder", "gpu1", "gpu2", "gpu3", "cpu1"]
    # Ansible: `ungrouped` is all's first child (ansible-inventory --list shows it so).
    assert cluster.groups["all"].children == ["ungrouped", "gpus", "cpus"]
    assert isinstance(cluster.groups["all"], Group)


def test_top_level_groups_besides_all_become_children_of_all() -> None:
    inv = load(
        "hosts.yml",
        """
        gpus:
          hosts:
            gpu1:
        all:
          vars: {a: 1}
        """,
    )
    assert "gpus" in inv.groups["all"].children
    assert inv.hosts["gpu1"].groups == ["all", "gpus"]
    assert inv.hosts["gpu1"].vars == {"a": 1}


def test_empty_groups_hosts_and_documents_are_allowed() -> None:
    inv = load(
        "hosts.yaml",
        """
        all:
          children:
            empty:
            gpus:
              hosts:
              vars:
              children:
        """,
    )
    assert inv.hosts == {}
    assert {"empty", "gpus"} <= set(inv.groups)
    assert load_inventory(write("blank.yaml", "# nothing yet\n")).hosts == {}


def test_json_inventory_with_tabs() -> None:
    inv = load(
        "hosts.json",
        '{\n\t"all": {\n\t\t"hosts": {"gpu1": {"ansible_port": 2222}}\n\t}\n}\n',
    )
    assert inv.hosts["gpu1"].port == 2222


def test_yaml_anchors_and_merge_keys() -> None:
    inv = load(
        "hosts.yaml",
        """
        all:
          hosts:
            gpu1: &common {ansible_user: ci, cuda: "12.8"}
            gpu2:
              <<: *common
              cuda: "13.0"
        """,
    )
    assert inv.hosts["gpu2"].vars == {"ansible_user": "ci", "cuda": "13.0"}


def test_host_under_several_groups_merges_inline_host_vars() -> None:
    inv = load(
        "hosts.yaml",
        """
        all:
          children:
            a:
              hosts:
                gpu1: {x: from-a, only_a: 1}
            b:
              hosts:
                gpu1: {x: from-b, only_b: 2}
        """,
    )
    host = inv.hosts["gpu1"]
    assert host.vars == {"x": "from-b", "only_a": 1, "only_b": 2}
    assert host.var_sources["only_a"] == "hosts.yaml: host gpu1"
    assert host.groups == ["a", "all", "b"]


def test_to_dict_is_json_ready(cluster: Inventory) -> None:
    data = json.loads(json.dumps(cluster.to_dict()))
    assert data["hosts"]["gpu1"] == {
        "groups": ["all", "gpus"],
        "vars": {"ansible_user": "root", "work_root": "/data", "cuda": "13.0"},
        "var_sources": {
            "ansible_user": "inventory/hosts.yaml: group all",
            "work_root": "inventory/group_vars/all.yaml",
            "cuda": "inventory/group_vars/gpus.yaml",
        },
    }
    assert data["groups"]["gpus"] == {
        "hosts": ["gpu1", "gpu2", "gpu3"],
        "children": ["rtx"],
        "vars": {"cuda": "13.0"},
    }


def test_paths_outside_cwd_are_shown_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write("inv/hosts.yaml", "all:\n  hosts:\n    gpu1:\n  vars: {a: 1}\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    inv = load_inventory(tmp_path / path)
    assert inv.hosts["gpu1"].var_sources["a"] == f"{tmp_path / path}: group all"


# --------------------------------------------------------------------------- INI


INI = """
# hosts before any section are ungrouped
builder ansible_host=10.0.0.9

[gpus]
gpu1 ansible_port=2222 has_gpu=True tags="['a', 'b']" note='two words'
gpu2  # trailing comments are fine
; comment lines too

[gpus:vars]
cuda=12.8
enabled=FALSE
quoted="/usr/bin/python3"

[rtx:children]
blackwell

[blackwell]
gpu2

[all:vars]
ansible_user=root
"""


def test_ini_sections_vars_children_and_ungrouped() -> None:
    inv = load("hosts.ini", INI)
    assert list(inv.hosts) == ["builder", "gpu1", "gpu2"]
    assert inv.hosts["builder"].groups == ["all", "ungrouped"]
    assert inv.hosts["gpu2"].groups == ["all", "blackwell", "gpus", "rtx"]
    assert inv.groups["rtx"].children == ["blackwell"]
    assert inv.groups["rtx"].hosts == ["gpu2"]
    gpu1 = inv.hosts["gpu1"].vars
    # Inline host vars are Python literals when they parse as one ...
    assert gpu1["ansible_port"] == 2222
    assert gpu1["has_gpu"] is True
    assert gpu1["tags"] == ["a", "b"]
    assert gpu1["note"] == "two words"
    # ... and so are [group:vars] values (ansible-core 2.18/2.19 read both with
    # ast.literal_eval; this test used to expect strings, which Ansible proved wrong).
    assert gpu1["cuda"] == 12.8
    assert gpu1["enabled"] == "FALSE"  # not a Python literal: stays text
    assert gpu1["quoted"] == "/usr/bin/python3"
    assert gpu1["ansible_user"] == "root"
    assert inv.hosts["gpu1"].var_sources["cuda"] == "hosts.ini: group gpus"
    assert inv.hosts["gpu1"].var_sources["ansible_port"] == "hosts.ini: host gpu1"


def test_ini_detected_without_extension() -> None:
    inv = load("hosts", INI)
    assert inv.hosts["gpu1"].port == 2222
    bare = load("bare", "gpu1 ansible_user=ci\ngpu2:2200\n")
    assert bare.hosts["gpu1"].user == "ci"
    assert bare.hosts["gpu2"].port == 2200
    assert bare.hosts["gpu2"].groups == ["all", "ungrouped"]


def test_yaml_detected_without_extension() -> None:
    inv = load("hosts", "all:\n  hosts:\n    gpu1:\n")
    assert list(inv.hosts) == ["gpu1"]


def test_cfg_extension_is_ini() -> None:
    inv = load("hosts.cfg", "[gpus]\ngpu1\n[rtx:hosts]\ngpu2\n")  # Ansible allows ':hosts'
    assert list(inv.hosts) == ["gpu1", "gpu2"]
    assert inv.groups["rtx"].hosts == ["gpu2"]


def test_ini_ranges_with_inline_vars() -> None:
    inv = load("hosts.ini", "[gpus]\ngpu[1:3] ansible_user=ci\n")
    assert list(inv.hosts) == ["gpu1", "gpu2", "gpu3"]
    assert all(host.user == "ci" for host in inv.hosts.values())


def test_ini_group_priority_is_read_as_int() -> None:
    inv = load(
        "hosts.ini",
        """
        [a]
        gpu1
        [b]
        gpu1
        [a:vars]
        x=from-a
        ansible_group_priority=10
        [b:vars]
        x=from-b
        """,
    )
    assert inv.groups["a"].priority == 10
    assert inv.hosts["gpu1"].vars["x"] == "from-a"
    assert "ansible_group_priority" not in inv.hosts["gpu1"].vars


# --------------------------------------------------------------------------- group_vars / host_vars


@pytest.mark.parametrize("name", ["gpus.yaml", "gpus.yml", "gpus.json", "gpus"])
def test_group_vars_file_forms(name: str) -> None:
    body = '{"cuda": "13.0"}\n' if name.endswith(".json") else "cuda: '13.0'\n"
    write(f"inv/group_vars/{name}", body)
    inv = load("inv/hosts.yaml", "all:\n  children:\n    gpus:\n      hosts:\n        gpu1:\n")
    assert inv.hosts["gpu1"].vars == {"cuda": "13.0"}
    assert inv.hosts["gpu1"].var_sources["cuda"] == f"inv/group_vars/{name}"


def test_group_vars_directory_merged_in_name_order() -> None:
    write("inv/group_vars/gpus/20-late.yml", "cuda: '13.0'\nlate: 1\n")
    write("inv/group_vars/gpus/10-early.yaml", "cuda: '12.8'\nearly: 1\n")
    write("inv/group_vars/gpus/README.md", "not: read\n")
    write("inv/group_vars/gpus/.hidden.yaml", "hidden: 1\n")
    inv = load("inv/hosts.yaml", "all:\n  children:\n    gpus:\n      hosts:\n        gpu1:\n")
    host = inv.hosts["gpu1"]
    assert host.vars == {"cuda": "13.0", "early": 1, "late": 1}
    assert host.var_sources["cuda"] == "inv/group_vars/gpus/20-late.yml"
    assert host.var_sources["early"] == "inv/group_vars/gpus/10-early.yaml"
    assert inv.groups["gpus"].vars == {"cuda": "13.0", "early": 1, "late": 1}


def test_host_vars_files_and_directories() -> None:
    write("inv/host_vars/gpu1.yml", "a: file\n")
    write("inv/host_vars/gpu2/main.yaml", "a: dir\nb: 1\n")
    write("inv/host_vars/gpu2/zz.json", '{"b": 2}\n')
    write("inv/host_vars/unknown.yaml", "ignored: true\n")
    inv = load("inv/hosts.yaml", "all:\n  hosts:\n    gpu1:\n    gpu2:\n")
    assert inv.hosts["gpu1"].vars == {"a": "file"}
    assert inv.hosts["gpu2"].vars == {"a": "dir", "b": 2}
    assert inv.hosts["gpu2"].var_sources["b"] == "inv/host_vars/gpu2/zz.json"


def test_empty_vars_file_is_fine() -> None:
    write("inv/group_vars/all.yaml", "# nothing\n")
    inv = load("inv/hosts.yaml", "all:\n  hosts:\n    gpu1:\n")
    assert inv.hosts["gpu1"].vars == {}


# --------------------------------------------------------------------------- precedence

TREE = """
all:
  vars: {x: inv-all}
  children:
    gpus:
      vars: {x: inv-gpus}
      children:
        rtx:
          vars: {x: inv-rtx}
          hosts:
            gpu1: {HOSTVAR}
"""


def precedence(files: dict[str, str], host_var: str = "") -> tuple[object, str]:
    for rel, body in files.items():
        write(rel, body)
    inline = "{x: inv-host}" if host_var else ""
    inv = load("inventory/hosts.yaml", TREE.replace("{HOSTVAR}", inline))
    host = inv.hosts["gpu1"]
    return host.vars["x"], host.var_sources["x"]


def test_precedence_all_group_below_parent_below_child_in_inventory_file() -> None:
    value, source = precedence({})
    assert (value, source) == ("inv-rtx", "inventory/hosts.yaml: group rtx")
    inv = load("other.yaml", TREE.replace("{HOSTVAR}", "").replace("x: inv-rtx", "y: 1"))
    assert inv.hosts["gpu1"].vars["x"] == "inv-gpus"


def test_precedence_inventory_group_vars_below_group_vars_all() -> None:
    value, source = precedence({"inventory/group_vars/all.yaml": "x: gv-all\n"})
    assert (value, source) == ("gv-all", "inventory/group_vars/all.yaml")


def test_precedence_group_vars_all_below_group_vars_group() -> None:
    value, source = precedence(
        {"inventory/group_vars/all.yaml": "x: gv-all\n", "inventory/group_vars/gpus": "x: gv\n"}
    )
    assert (value, source) == ("gv", "inventory/group_vars/gpus")


def test_precedence_group_vars_parent_below_group_vars_child() -> None:
    value, source = precedence(
        {
            "inventory/group_vars/rtx.yml": "x: gv-rtx\n",
            "inventory/group_vars/gpus.yml": "x: gv-gpus\n",
        }
    )
    assert (value, source) == ("gv-rtx", "inventory/group_vars/rtx.yml")


def test_precedence_group_vars_below_inventory_host_vars() -> None:
    value, source = precedence({"inventory/group_vars/rtx.yml": "x: gv-rtx\n"}, host_var="yes")
    assert (value, source) == ("inv-host", "inventory/hosts.yaml: host gpu1")


def test_precedence_inventory_host_vars_below_host_vars_dir() -> None:
    value, source = precedence({"inventory/host_vars/gpu1.yaml": "x: hv\n"}, host_var="yes")
    assert (value, source) == ("hv", "inventory/host_vars/gpu1.yaml")


def test_precedence_replaces_dicts_whole() -> None:
    write("inventory/host_vars/gpu1.yaml", "env: {B: 2}\n")
    inv = load("inventory/hosts.yaml", "all:\n  vars: {env: {A: 1}}\n  hosts:\n    gpu1:\n")
    assert inv.hosts["gpu1"].vars["env"] == {"B": 2}


SIBLINGS = """
all:
  children:
    alpha:
      vars: {x: alpha}
      hosts: {gpu1: }
    beta:
      vars: {x: beta}
      hosts: {gpu1: }
"""


def test_group_priority_ties_broken_by_name() -> None:
    inv = load("hosts.yaml", SIBLINGS)
    assert inv.hosts["gpu1"].vars["x"] == "beta"


def test_group_priority_higher_wins_among_same_depth() -> None:
    inv = load(
        "hosts.yaml", SIBLINGS.replace("{x: alpha}", "{x: alpha, ansible_group_priority: 5}")
    )
    assert inv.hosts["gpu1"].vars["x"] == "alpha"
    assert inv.groups["alpha"].priority == 5
    assert "ansible_group_priority" not in inv.groups["alpha"].vars


def test_group_priority_also_orders_group_vars_files() -> None:
    write("group_vars/alpha.yaml", "y: alpha\n")
    write("group_vars/beta.yaml", "y: beta\n")
    inv = load("hosts.yaml", SIBLINGS.replace("{x: alpha}", "{ansible_group_priority: 5}"))
    assert inv.hosts["gpu1"].vars["y"] == "alpha"


def test_depth_beats_priority() -> None:
    inv = load(
        "hosts.yaml",
        """
        all:
          children:
            parent:
              vars: {x: parent, ansible_group_priority: 99}
              children:
                child:
                  vars: {x: child}
                  hosts: {gpu1: }
        """,
    )
    assert inv.hosts["gpu1"].vars["x"] == "child"


# --------------------------------------------------------------------------- ranges


def test_ranges_numeric_padded_alpha_step_and_nested() -> None:
    inv = load(
        "hosts.yaml",
        """
        all:
          hosts:
            gpu[1:4]: {ansible_user: ci}
            node[08:10]:
            rack[a:c]:
            x[0:8:4]:
            r[1:2]-n[1:2]:
        """,
    )
    assert list(inv.hosts) == [
        *["gpu1", "gpu2", "gpu3", "gpu4"],
        *["node08", "node09", "node10"],
        *["racka", "rackb", "rackc"],
        *["x0", "x4", "x8"],
        *["r1-n1", "r1-n2", "r2-n1", "r2-n2"],
    ]
    assert inv.hosts["gpu3"].user == "ci"
    node01 = load("b.yaml", "all:\n  hosts:\n    node[01:10]:\n")
    assert list(node01.hosts)[0] == "node01" and list(node01.hosts)[-1] == "node10"
    assert len(node01.hosts) == 10


def test_host_key_with_port() -> None:
    inv = load("hosts.yaml", "all:\n  hosts:\n    gpu[1:2]:2222:\n    '[fe80::1]:22':\n")
    assert [(h.name, h.port) for h in inv.hosts.values()] == [
        ("gpu1", 2222),
        ("gpu2", 2222),
        ("fe80::1", 22),
    ]


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("gpu[1:]", "no end value"),
        ("gpu[01:9]", "equal length"),
        ("gpu[4:1]", "start > end"),
        ("gpu[1:4", "bad host range"),
        ("gpu[1-4]", "[start:end]"),
        ("gpu[1:a]", "both be numbers"),
        ("gpu[1:4:0]", "bad step"),
    ],
)
def test_bad_range_in_yaml(key: str, why: str) -> None:
    message = error_of(
        "hosts.yaml", f"all:\n  children:\n    gpus:\n      hosts:\n        {key}:\n"
    )
    assert message.startswith("hosts.yaml:5: all.children.gpus.hosts."), message
    assert why in message


def test_bad_range_in_ini() -> None:
    message = error_of("hosts.ini", "[gpus]\ngpu1\ngpu[3:1] a=1\n")
    assert message.startswith("hosts.ini:3: [gpus] gpu[3:1]:"), message
    assert "start > end" in message


# --------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu2", ["gpu2"]),
        ("gpus", ["gpu1", "gpu2", "gpu3"]),
        ("rtx", ["gpu2", "gpu3"]),
        ("all", ["builder", "gpu1", "gpu2", "gpu3", "cpu1"]),
        ("*", ["builder", "gpu1", "gpu2", "gpu3", "cpu1"]),
        ("gpu*", ["gpu1", "gpu2", "gpu3"]),
        ("gpu?", ["gpu1", "gpu2", "gpu3"]),
        ("rt*", ["gpu2", "gpu3"]),  # globs match group names too
        ("*1", ["gpu1", "cpu1"]),
        ("all:!gpu3", ["builder", "gpu1", "gpu2", "cpu1"]),
        ("!gpus", ["builder", "cpu1"]),  # only exclusions: from all
        ("gpus:!rtx", ["gpu1"]),
        ("gpus:&rtx", ["gpu2", "gpu3"]),
        ("gpus:&rtx:!gpu3", ["gpu2"]),
        ("gpu3,gpu1", ["gpu3", "gpu1"]),  # the order written, as Ansible (was: inventory order)
        ("gpu1, gpu1 ,gpus", ["gpu1", "gpu2", "gpu3"]),  # no duplicates
        ("cpus:builder", ["cpu1", "builder"]),  # ':' union, in the order written
        ("cpus,!cpu1,gpu1", ["gpu1"]),
    ],
)
def test_select_patterns(cluster: Inventory, pattern: str, expected: list[str]) -> None:
    assert names(cluster.select(pattern)) == expected


def test_select_returns_resolved_hosts(cluster: Inventory) -> None:
    (host,) = cluster.select("gpu1")
    assert host is cluster.hosts["gpu1"]
    assert host.vars["cuda"] == "13.0"


def test_select_local_implicit(cluster: Inventory) -> None:
    (host,) = cluster.select("local")
    assert host.name == "local"
    assert host.is_local
    assert host.vars["ansible_connection"] == "local"
    assert host.vars["work_root"] == "/data"  # group_vars/all still applies
    assert "local" not in cluster.hosts


def test_select_local_from_inventory() -> None:
    inv = load("hosts.yaml", "all:\n  hosts:\n    local: {ansible_connection: local, x: 1}\n")
    (host,) = inv.select("local")
    assert host is inv.hosts["local"]
    assert host.vars["x"] == 1


@pytest.mark.parametrize(
    ("token", "addr", "port", "user"),
    [
        ("ci@10.0.0.7:2222", "10.0.0.7", 2222, "ci"),
        ("ci@gpu.example.com", "gpu.example.com", None, "ci"),
        ("gpu.example.com:22", "gpu.example.com", 22, None),
        ("10.0.0.7", "10.0.0.7", None, None),
        ("fe80::1", "fe80::1", None, None),
        ("[fe80::1]:2200", "fe80::1", 2200, None),
        ("ci@[fe80::1]:2200", "fe80::1", 2200, "ci"),
    ],
)
def test_select_ad_hoc_hosts(
    cluster: Inventory, token: str, addr: str, port: int | None, user: str | None
) -> None:
    (host,) = cluster.select(token)
    assert host.name == token
    assert host.address == addr
    assert host.port == port
    # The inventory's `all` vars and group_vars/all still apply; group vars of others do not.
    assert host.user == (user or "root")
    assert host.vars["work_root"] == "/data"
    assert "cuda" not in host.vars
    assert host.groups == ["all"]
    assert host.var_sources["ansible_host"] == f"--host {token}"
    assert host.var_sources["work_root"] == "inventory/group_vars/all.yaml"


def test_select_mixes_inventory_and_ad_hoc(cluster: Inventory) -> None:
    selected = cluster.select("10.0.0.8:22,gpu3,local,gpu1")
    # The order written (Ansible's); this used to sort inventory hosts first.
    assert names(selected) == ["10.0.0.8:22", "gpu3", "local", "gpu1"]


def test_select_without_inventory() -> None:
    inv = load_inventory(None)
    assert inv.path is None and inv.hosts == {}
    assert names(inv.select("local")) == ["local"]
    (host,) = inv.select("root@10.0.0.1")
    assert host.vars == {"ansible_host": "10.0.0.1", "ansible_user": "root"}
    with pytest.raises(InventoryError, match="no inventory given"):
        inv.select("gpu1")


def test_unknown_name_lists_close_matches() -> None:
    inv = load("hosts.yaml", "all:\n  hosts:\n    gpu1:\n    gpu2:\n")
    with pytest.raises(InventoryError) as info:
        inv.select("gpu9")
    assert str(info.value) == "unknown host or group 'gpu9' in --host (did you mean: gpu1, gpu2?)"


def test_unknown_name_in_exclusion_is_an_error(cluster: Inventory) -> None:
    with pytest.raises(InventoryError, match=r"'gpu4' in --host \(did you mean: gpu1"):
        cluster.select("all:!gpu4")


def test_unknown_name_without_close_match(cluster: Inventory) -> None:
    with pytest.raises(InventoryError) as info:
        cluster.select("webserver")
    message = str(info.value)
    assert "unknown host or group 'webserver' in --host" in message
    assert "inventory/hosts.yaml" in message and "user@addr" in message


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("", "empty host pattern in --host"),
        ("  ,  ", "empty host pattern in --host"),
        ("web*", "host pattern 'web*' in --host matches no host or group"),
        ("gpus:!gpus", "host pattern 'gpus:!gpus' in --host matches no host"),
        ("gpus:&cpus", "host pattern 'gpus:&cpus' in --host matches no host"),
        ("ci@10.0.0.1:99999", "bad port '99999'"),
        ("@10.0.0.1", "bad ad hoc host '@10.0.0.1' in --host"),
    ],
)
def test_select_errors(cluster: Inventory, pattern: str, needle: str) -> None:
    with pytest.raises(InventoryError) as info:
        cluster.select(pattern)
    assert needle in str(info.value)


# --------------------------------------------------------------------------- malformed inventories


def test_missing_inventory_file() -> None:
    with pytest.raises(InventoryError) as info:
        load_inventory("nowhere/hosts.yaml")
    assert str(info.value) == "nowhere/hosts.yaml: inventory file does not exist"


def test_directory_given_as_inventory() -> None:
    Path("invdir").mkdir()
    with pytest.raises(InventoryError, match="invdir: is a directory"):
        load_inventory("invdir")


def test_yaml_syntax_error_names_file_and_line() -> None:
    message = error_of("hosts.yaml", "all:\n  hosts:\n    gpu1: {a: 1\n    gpu2:\n")
    assert message.startswith("hosts.yaml:4: YAML syntax error:"), message


def test_top_level_not_a_mapping() -> None:
    message = error_of("hosts.yaml", "- gpu1\n- gpu2\n")
    assert message.startswith("hosts.yaml:1: expected a mapping of groups"), message


def test_group_value_not_a_mapping() -> None:
    message = error_of("hosts.yaml", "all:\n  children:\n    gpus: gpu1\n")
    assert message.startswith("hosts.yaml:3: all.children.gpus: expected a mapping"), message
    assert "got str 'gpu1'" in message


def test_unknown_key_in_group_lists_allowed_keys() -> None:
    message = error_of("hosts.yaml", "all:\n  children:\n    gpus:\n      host:\n        gpu1:\n")
    assert message.startswith("hosts.yaml:4: all.children.gpus.host: unknown key 'host'"), message
    assert "allowed: hosts, children, vars" in message


def test_hosts_given_as_list() -> None:
    message = error_of(
        "inv/hosts.yaml",
        "all:\n  children:\n    gpus:\n      hosts:\n        - gpu1\n        - gpu2\n",
    )
    assert (
        message
        == "inv/hosts.yaml:5: all.children.gpus.hosts: expected a mapping of host names, got a list"
    )


def test_children_given_as_list() -> None:
    message = error_of("hosts.yaml", "all:\n  children:\n    - gpus\n")
    assert message == "hosts.yaml:3: all.children: expected a mapping of group names, got a list"


def test_vars_not_a_mapping() -> None:
    message = error_of("hosts.yaml", "all:\n  hosts:\n    gpu1:\n  vars:\n    - a=1\n")
    assert message == "hosts.yaml:5: all.vars: expected a mapping of variables, got a list"


def test_host_vars_not_a_mapping() -> None:
    message = error_of("hosts.yaml", "all:\n  hosts:\n    gpu1: 10.0.0.1\n")
    assert message.startswith("hosts.yaml:3: all.hosts.gpu1: expected a mapping of host var")


def test_non_string_host_name() -> None:
    message = error_of("hosts.yaml", "all:\n  children:\n    gpus:\n      hosts:\n        1234:\n")
    assert message == (
        "hosts.yaml:5: all.children.gpus.hosts: host name must be a string, got int 1234"
    )


def test_bad_host_name() -> None:
    message = error_of("hosts.yaml", "all:\n  hosts:\n    'gpu 1':\n")
    assert message.startswith("hosts.yaml:3: all.hosts.gpu 1: bad host name"), message


def test_child_group_cycle() -> None:
    message = error_of(
        "hosts.yaml",
        """
        all:
          children:
            a:
              children:
                b:
                  children:
                    c:
            c:
              children:
                a:
        """,
    )
    assert message.startswith("hosts.yaml:10: all.children.c.children.a:"), message
    assert "child group cycle: a -> b -> c -> a" in message


def test_group_that_is_its_own_child() -> None:
    message = error_of("hosts.yaml", "all:\n  children:\n    a:\n      children:\n        a:\n")
    assert message.startswith("hosts.yaml:5: all.children.a.children.a:"), message
    assert "cycle: a -> a" in message


def test_all_as_a_child_group() -> None:
    message = error_of("hosts.yaml", "gpus:\n  children:\n    all:\n")
    assert message.startswith("hosts.yaml:3: gpus.children.all: child group cycle"), message


@pytest.mark.parametrize(
    ("body", "line", "key"),
    [
        ("all:\n  vars:\n    ansible_port: ssh\n", 3, "all.vars.ansible_port"),
        ("all:\n  hosts:\n    gpu1:\n      ansible_port: 22.5\n", 4, "all.hosts.gpu1.ansible_port"),
        ("all:\n  hosts:\n    gpu1:\n      ansible_port: true\n", 4, "all.hosts.gpu1.ansible_port"),
    ],
)
def test_ansible_port_not_an_integer_in_yaml(body: str, line: int, key: str) -> None:
    message = error_of("hosts.yaml", body)
    assert message.startswith(f"hosts.yaml:{line}: {key}: ansible_port must be an integer"), message


def test_ansible_port_out_of_range() -> None:
    message = error_of("hosts.yaml", "all:\n  hosts:\n    gpu1: {ansible_port: 70000}\n")
    assert message.startswith("hosts.yaml:3: all.hosts.gpu1.ansible_port:"), message
    assert "1-65535" in message


def test_ansible_port_not_an_integer_in_ini() -> None:
    message = error_of("hosts.ini", "[gpus]\ngpu1\ngpu2 ansible_port=abc\n")
    assert message.startswith("hosts.ini:3: [gpus] gpu2 ansible_port:"), message
    assert "ansible_port must be an integer, got 'abc'" in message
    # In [group:vars] the value is read with ast.literal_eval as in Ansible, so a trailing
    # comment is just a comment (this used to be an error; ansible-core reads 22).
    inv = load("vars.ini", "[gpus]\ngpu1\n[gpus:vars]\nansible_port=22 # ssh\n")
    assert inv.hosts["gpu1"].vars["ansible_port"] == 22
    message = error_of("bad.ini", "[gpus]\ngpu1\n[gpus:vars]\nansible_port=ssh\n")
    assert message.startswith("bad.ini:4: [gpus:vars] ansible_port:"), message


def test_ansible_port_not_an_integer_in_group_vars_file() -> None:
    message = error_of(
        "inv/hosts.yaml",
        "all:\n  hosts:\n    gpu1:\n",
        extra={"inv/group_vars/all.yaml": "# ssh\nansible_user: ci\nansible_port: ssh\n"},
    )
    assert message.startswith("inv/group_vars/all.yaml:3: ansible_port:"), message


def test_group_vars_file_not_a_mapping() -> None:
    message = error_of(
        "inv/hosts.yaml",
        "all:\n  hosts:\n    gpu1:\n",
        extra={"inv/host_vars/gpu1.yaml": "# vars\n- a\n- b\n"},
    )
    assert message == "inv/host_vars/gpu1.yaml:2: expected a mapping of variables, got a list"


def test_group_vars_file_syntax_error() -> None:
    message = error_of(
        "inv/hosts.yaml",
        "all:\n  hosts:\n    gpu1:\n",
        extra={"inv/group_vars/all.yml": "a: 1\nb: [1, 2\n"},
    )
    assert message.startswith("inv/group_vars/all.yml:3: YAML syntax error"), message


@pytest.mark.parametrize(
    ("body", "prefix", "needle"),
    [
        ("[gpus\ngpu1\n", "hosts.ini:1:", "bad section header '[gpus'"),
        ("[gpus:var]\ngpu1\n", "hosts.ini:1: [gpus:var]:", "unknown section type 'var'"),
        ("[gpus]\ngpu1\n[gpus:vars]\ncuda 12.8\n", "hosts.ini:4: [gpus:vars]:", "key=value"),
        ("[gpus]\ngpu1 ansible_user\n", "hosts.ini:2: [gpus] gpu1:", "expected key=value"),
        ("[gpus]\ngpu1 note='open\n", "hosts.ini:2: [gpus]:", "cannot parse host line"),
        ("[gpus]\ncuda=12.8\n", "hosts.ini:2: [gpus]:", "[gpus:vars]"),
        ("[a:children]\nb c\n", "hosts.ini:2: [a:children]:", "one group name per line"),
        ("[a:children]\nb\n", "hosts.ini:2: [a:children] b:", "group 'b' is never declared"),
        ("[a:vars]\nx=1\n", "hosts.ini:1: [a:vars]:", "group 'a' is never declared"),
        ("[gpus]\ngpu1:ssh\n", "hosts.ini:2: [gpus] gpu1:ssh:", "bad host name"),
        (
            "[a:children]\nb\n[b:children]\na\n[a]\n[b]\n",
            "hosts.ini:4: [b:children] a:",
            "cycle: a -> b -> a",
        ),
    ],
)
def test_bad_ini(body: str, prefix: str, needle: str) -> None:
    message = error_of("hosts.ini", body)
    assert message.startswith(prefix), message
    assert needle in message


def test_ini_children_declared_later_is_fine() -> None:
    inv = load("hosts.ini", "[a:children]\nb\n[a:vars]\nx=1\n[b]\ngpu1\n")
    assert inv.hosts["gpu1"].groups == ["a", "all", "b"]
    assert inv.hosts["gpu1"].vars == {"x": 1}  # [a:vars] values are literals, as in Ansible


# --------------------------------------------------------------------------- shipped sample


def test_sample_inventory_in_tests_data() -> None:
    inv = load_inventory(DATA / "hosts.yaml")
    assert names(inv.select("gpus")) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert inv.hosts["gpu03"].vars["ansible_port"] == 2203
    assert inv.hosts["gpu03"].var_sources["ansible_port"].endswith("host_vars/gpu03.yaml")
    assert inv.hosts["gpu01"].vars["cuda_home"] == "/usr/local/cuda-12.8"
    assert inv.hosts["gpu01"].var_sources["cuda_home"].endswith("group_vars/gpus/cuda.yaml")
    assert inv.select("local")[0].is_local


# --------------------------------------------------------------------------- format detection


def test_ini_in_files_named_like_ansibles() -> None:
    """`inventory`, `hosts` and `*.inventory` hold INI as often as not: YAML is tried first (as
    Ansible does) and INI reads them when YAML does not."""
    for name in ("inventory", "hosts", "site.inventory", "odd.yml"):
        inv = load(name, "[web]\nweb1 port=80\n")
        assert inv.hosts["web1"].vars == {"port": 80}, name


def test_yaml_in_a_file_without_extension() -> None:
    inv = load("inventory", "web:\n  hosts:\n    web1:\n")
    assert names(inv.select("web")) == ["web1"]


def test_neither_parser_reads_it_says_what_each_said() -> None:
    message = error_of("hosts", "[web\nkey: [unclosed\n")
    assert message.startswith("hosts:1: bad section header '[web'"), message
    assert "(read as INI; read as YAML: " in message and "YAML syntax error" in message
    # A file that starts as a YAML mapping gets the YAML error alone: INI never reads one.
    message = error_of("hosts.yaml", "all:\n  hosts: [a]\n")
    assert message == "hosts.yaml:2: all.hosts: expected a mapping of host names, got a list"


def test_toml_and_plugin_configs_are_refused() -> None:
    assert "TOML inventories are not supported" in error_of("hosts.toml", "[web]\n")
    message = error_of("aws_ec2.yml", "plugin: amazon.aws.aws_ec2\nregions: [x]\n")
    assert message.startswith("aws_ec2.yml:1: plugin: this is an inventory plugin's"), message


def test_yaml_section_given_as_a_string_is_one_entry() -> None:
    """Ansible's YAML plugin reads `hosts: gpu1` as `hosts: {gpu1: }` (children too)."""
    inv = load(
        "hosts.yaml",
        "all:\n  children:\n    gpus:\n      hosts: gpu1\n    top:\n      children: gpus\n",
    )
    assert names(inv.select("gpus")) == ["gpu1"]
    assert inv.groups["top"].children == ["gpus"]


def test_ini_dashes_line_is_a_yaml_sign() -> None:
    message = error_of("hosts.ini", "---\n")
    assert "host '---' is a sign this is a YAML file" in message


# --------------------------------------------------------------------------- duplicate keys


@pytest.mark.parametrize(
    ("body", "line", "first", "key"),
    [
        ("all:\n  hosts:\n    a:\n    a:\n", 4, 3, "a"),
        ("all:\n  vars:\n    x: 1\n    y: 2\n    x: 3\n", 5, 3, "x"),
        ("all:\n  vars:\n    d: {k: 1, k: 2}\n", 3, 3, "k"),
        ("all:\n  hosts: {}\nall:\n  vars: {}\n", 3, 1, "all"),
    ],
)
def test_duplicate_yaml_keys_name_both_lines(body: str, line: int, first: int, key: str) -> None:
    """Ansible warns and keeps the last; a duplicate is almost always a mistake, so it is one."""
    message = error_of("hosts.yaml", body)
    assert message == f"hosts.yaml:{line}: duplicate key {key!r} (first at line {first})"


def test_duplicate_keys_in_group_vars_file() -> None:
    message = error_of(
        "inv/hosts.yaml", "all:\n  hosts:\n    a:\n", {"inv/group_vars/all.yml": "x: 1\nx: 2\n"}
    )
    assert message == "inv/group_vars/all.yml:2: duplicate key 'x' (first at line 1)"


def test_merge_keys_are_not_duplicates() -> None:
    inv = load(
        "hosts.yaml",
        "all:\n  vars:\n    base: &b {x: 1, y: 2}\n    over:\n      <<: *b\n      x: 9\n  hosts:\n    a:\n",
    )
    assert inv.hosts["a"].vars["over"] == {"x": 9, "y": 2}


# --------------------------------------------------------------------------- host var types


@pytest.mark.parametrize(
    ("rel", "body", "needle"),
    [
        (
            "hosts.ini",
            "[gpus]\ngpu1\n[gpus:vars]\nallow_cpu_torch=true\n",
            "hosts.ini:4: [gpus:vars] allow_cpu_torch: host gpu1: allow_cpu_torch must be true"
            " or false, got str 'true'",
        ),
        (
            "hosts.ini",
            "[gpus]\ngpu1 provision_packages=flash-attn\n",
            "hosts.ini:2: [gpus] gpu1 provision_packages: host gpu1: provision_packages must be"
            " a list of package names such as [\"flash-attn\"], got str 'flash-attn'",
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      max_jobs: '8'\n",
            "hosts.yaml:4: all.hosts.gpu1.max_jobs: host gpu1: max_jobs must be an integer >= 1,"
            " got str '8'",
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      nvcc_threads: true\n",
            "nvcc_threads must be an integer >= 1, got bool true",
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      target_driver: 575.5\n",
            'target_driver must be a quoted string such as "580.95.05", got float 575.5',
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      work_root: 5\n",
            "work_root must be a string, got int 5",
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      pip_args: [--proxy, 3128]\n",
            "pip_args must be a list of strings",
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      wheel_cache_stores: {type: dir}\n",
            "wheel_cache_stores must be a list of store mappings, got dict",
        ),
        (
            "hosts.yaml",
            "all:\n  hosts:\n    gpu1:\n      ansible_host:\n",
            "ansible_host must be a string, got null",
        ),
    ],
)
def test_host_var_of_the_wrong_type(rel: str, body: str, needle: str) -> None:
    message = error_of(rel, body)
    assert needle in message, message


def test_host_var_type_checked_on_the_winning_value() -> None:
    """A wrong group value that every host overrides is harmless; the error names the file
    and line of the value the host would get."""
    body = "[gpus]\ngpu1 max_jobs=4\n[gpus:vars]\nmax_jobs='4'\n"
    assert load("ok.ini", body).hosts["gpu1"].vars["max_jobs"] == 4
    message = error_of(
        "inv/hosts.yaml",
        "all:\n  hosts:\n    gpu1:\n",
        {"inv/host_vars/gpu1.yaml": "allow_cpu_torch: 'yes'\n"},
    )
    assert message.startswith("inv/host_vars/gpu1.yaml:1: allow_cpu_torch: host gpu1:"), message


def test_all_vars_checked_without_hosts() -> None:
    """Hosts outside the inventory (ad hoc, `local`) get the `all` vars: they are checked too."""
    message = error_of("hosts.yaml", "all:\n  vars:\n    max_jobs: many\n")
    assert "host (every host): max_jobs must be an integer >= 1" in message


def test_right_types_pass_and_null_means_unset() -> None:
    inv = load(
        "hosts.yaml",
        """
        all:
          hosts:
            gpu1:
              allow_cpu_torch: true
              provision_packages: [flash-attn]
              max_jobs: 8
              nvcc_threads:
              pip_args: --proxy http://p:3128
              target_arch: 12.0
              target_driver: "580.95.05"
              wheel_cache_host_store: false
              wheel_cache_stores: [{type: dir, path: /srv/wheels}]
              ansible_port: "2222"
        """,
    )
    assert inv.hosts["gpu1"].vars["max_jobs"] == 8


# --------------------------------------------------------------------------- Ansible order


def test_ansible_list_document() -> None:
    inv = load("hosts.ini", "u1\n[web]\nw1 x=1\n[empty]\n[all:children]\nweb\n")
    assert inv.to_ansible_list() == {
        "_meta": {"hostvars": {"w1": {"x": 1}}},
        "all": {"children": ["ungrouped", "web", "empty"]},
        "ungrouped": {"hosts": ["u1"]},
        "web": {"hosts": ["w1"]},
    }

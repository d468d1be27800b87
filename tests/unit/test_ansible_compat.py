"""Inventories read exactly as ansible-core reads them, checked against ansible-core itself.

ansible-core is a test dependency (the `test` extra), and the reference: for every inventory
under tests/fixtures/inventories this runs `ansible-inventory -i F --list`, Ansible's own
`InventoryManager.list_hosts(PATTERN)` for many patterns (what `ansible PATTERN --list-hosts`
prints; a few patterns also go through that command itself to tie the two), and `invoke
inventory --json` once, and compares hosts, groups, children, variables (type-strictly: 1, 1.0,
True and "1" all differ) and pattern results in order. Nothing here is simulated.

The Ansible side runs once per module, in three processes started side by side (each ansible
process takes about a second to start).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import InventoryError
from sm120kit.inventory.load import Inventory, load_inventory
from tests.conftest import invoke_env, json_of, run_invoke

FIXTURES = Path(__file__).parent.parent / "fixtures" / "inventories"

#: Every inventory compared with `ansible-inventory --list`.
SOURCES = [
    "ini_types/hosts",  # INI without extension: every value type on host lines and in :vars
    "yaml_tree/hosts.yaml",  # YAML: nested children, ranges, ports, priorities, YAML 1.1 types
    "order/hosts.ini",  # children named before their sections, ungrouped hosts
    "detect/site.inventory",  # INI in a *.inventory file
    "detect/inventory",  # YAML in a file named `inventory`
    "detect/hosts",  # bare host lines in `hosts`: YAML reads a string, so INI takes it
    "detect/hosts.json",  # JSON
    "detect/ini_in.yml",  # INI in a .yml file: YAML fails, INI reads it (as in Ansible)
]

#: Patterns whose results (and order) must equal Ansible's.
PATTERNS = {
    "yaml_tree/hosts.yaml": [
        "all",
        "*",
        "al*",  # a glob matches the group `all` too
        "ungrouped",
        "gpus",
        "rtx",
        "blackwell",
        "bastion",
        "gpus[0]",
        "gpus[-1]",
        "gpus[1:3]",
        "gpus[2:]",
        "gpus[0:0]",
        "gpus[1-2]",  # the old [x-y] form, still read by Ansible (with a warning)
        "rtx[0:1]",
        "all[0:2]",
        "gpu?[0]",  # a subscript on a glob
        "gpu*[-2]",
        "*[3]",
        "~gpu[13]",  # a regex keeps its brackets
        "~gpu",
        "~^(cpu|bas)",
        "~.*[0]",
        "gpu*",
        "*1",
        "gpus:!rtx",
        "gpus:&rtx",
        "!gpus",
        "&rtx",
        "rtx,gpu1",
        "gpu3,bastion,cpus",
        "extra:gpu6:cpus",
    ],
    "order/hosts.ini": [
        "all",
        "*",
        "zeta",
        "alpha,zeta",
        "zeta:alpha",
        "ungrouped",
        "all[-1]",
        "~[az]",
        "a1,u1,zeta",
    ],
    "ini_types/hosts": [
        "all",
        "prod",
        "web[1:]",
        "db[0]",
        "~db[ab]",
        "web0?",
        "prod:&staging",
        "staging:web01",
        "lonely",
        "web*:!web04",
    ],
}

#: Kept on purpose: where Ansible warns and goes on (matching nothing for that term), this tool
#: stops with an error, so a typo never silently shrinks or empties a run.
STRICTER = {
    "yaml_tree/hosts.yaml": [
        "nosuch",  # Ansible: no hosts, a warning
        "all:!nosuch",  # Ansible: every host
        "gpu[1:2]",  # a subscript of `gpu`, which matches nothing (not a host range)
        "gpus:!gpu[1:2]",  # Ansible: every gpus host
        "gpus[7:9]",  # a slice past the end: Ansible gives no host
        "gpus[9]",  # Ansible: an error too
    ],
}

#: A few patterns also run through `ansible PATTERN --list-hosts` itself.
CLI_PATTERNS = [("yaml_tree/hosts.yaml", "gpus[1:3]"), ("order/hosts.ini", "all")]

#: Files no parser reads: Ansible (with unparsed inventories made fatal) and this tool refuse them.
UNREADABLE = {
    "neither": "[broken\nkey: [unclosed\n",
    "list.yaml": "- a\n- b\n",
}

# Run by this Python (where the `test` extra installed ansible-core): ansible-inventory's own
# code (InventoryCLI with --list) for each inventory, then list_hosts(PATTERN) on the inventory
# it loaded, which is what `ansible PATTERN --list-hosts` prints. Ansible is imported once and
# each inventory runs in a forked child (ansible-core's CLI state is once per process), so the
# whole reference costs about one ansible start instead of one per inventory.
_REFERENCE_SCRIPT = """
import json, os, sys, tempfile
from ansible.cli.inventory import InventoryCLI

def run(source, patterns, out_path):
    cli = InventoryCLI(["ansible-inventory", "-i", source, "--list", "--output", out_path])
    try:
        cli.run()
    except SystemExit as exc:
        if exc.code:
            return {"error": "exit %s" % exc.code}
    except Exception as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    with open(out_path) as fh:
        result = {"list": json.load(fh), "patterns": {}}
    for pattern in patterns:
        try:
            result["patterns"][pattern] = [h.name for h in cli.inventory.list_hosts(pattern)]
        except Exception as exc:
            result["patterns"][pattern] = {"error": str(exc)}
    return result

tmp = tempfile.mkdtemp()
children = {}
for index, (source, patterns) in enumerate(json.load(sys.stdin).items()):
    out_path, res_path = [os.path.join(tmp, "%d.%s" % (index, ext)) for ext in ("out", "json")]
    pid = os.fork()
    if pid == 0:
        try:
            result = run(source, patterns, out_path)
        except BaseException as exc:
            result = {"error": repr(exc)}
        with open(res_path, "w") as fh:
            json.dump(result, fh)
        os._exit(0)
    children[source] = (pid, res_path)
out = {}
for source, (pid, res_path) in children.items():
    os.waitpid(pid, 0)
    with open(res_path) as fh:
        out[source] = json.load(fh)
print(json.dumps(out))
"""

#: The real commands, run once each, must print what the reference script found.
COMMAND_LIST = "yaml_tree/hosts.yaml"


def _ansible_tool(name: str) -> str:
    """The ansible-core command installed with this Python (the `test` extra); its absence
    fails the tests: they are the reference and must not silently skip."""
    if importlib.util.find_spec("ansible") is None:
        pytest.fail("ansible-core is a test dependency: pip install -e '.[test]'")
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} (ansible-core, a test dependency) is not installed")
    return found


def _ansible_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(tmp / "ansible.cfg"),  # empty: nothing from the machine's config
        ANSIBLE_HOME=str(tmp),
        TMPDIR=str(tmp),  # the reference script's scratch files stay in pytest's tmp dir
        ANSIBLE_LOCAL_TEMP=str(tmp / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="false",
        ANSIBLE_HOST_PATTERN_MISMATCH="ignore",
        # A file no inventory plugin reads is an error, not a warning and an empty inventory.
        ANSIBLE_INVENTORY_UNPARSED_FAILED="true",
    )
    return env


@pytest.fixture(scope="module")
def ansible(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Everything Ansible says about the fixtures: the reference script and the two real
    commands, run side by side."""
    tmp = tmp_path_factory.mktemp("ansible")
    (tmp / "ansible.cfg").write_text("", encoding="utf-8")
    env = _ansible_env(tmp)
    inventory_cmd, adhoc_cmd = _ansible_tool("ansible-inventory"), _ansible_tool("ansible")
    spec: dict[str, list[str]] = {}
    for source in SOURCES:
        spec[str(FIXTURES / source)] = PATTERNS.get(source, []) + STRICTER.get(source, [])
    for name, text in UNREADABLE.items():
        (tmp / name).write_text(text, encoding="utf-8")
        spec[str(tmp / name)] = []

    def start(args: list[str], piped: bool = False) -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            cwd=tmp,
            env=env,
            text=True,
            stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    procs: dict[Any, subprocess.Popen[str]] = {
        "reference": start([sys.executable, "-c", _REFERENCE_SCRIPT], piped=True),
        "list": start([inventory_cmd, "-i", str(FIXTURES / COMMAND_LIST), "--list"]),
    }
    for source, pattern in CLI_PATTERNS:
        procs[(source, pattern)] = start(
            [adhoc_cmd, pattern, "-i", str(FIXTURES / source), "--list-hosts"]
        )
    outputs: dict[Any, str] = {}
    for key, proc in procs.items():
        out, err = proc.communicate(json.dumps(spec) if key == "reference" else None, timeout=300)
        assert proc.returncode == 0, f"{key}: exit {proc.returncode}\n{err}"
        outputs[key] = out
    found = json.loads(outputs["reference"])
    said: dict[str, Any] = {"list": {}, "patterns": {}, "cli": {}, "unreadable": {}}
    for source in SOURCES:
        entry = found[str(FIXTURES / source)]
        assert "error" not in entry, (source, entry)
        entry["list"]["_meta"].pop("profile", None)  # ansible-core 2.19's name for the format
        said["list"][source] = entry["list"]
        said["patterns"][source] = entry["patterns"]
    for name in UNREADABLE:
        said["unreadable"][name] = found[str(tmp / name)]
    said["command_list"] = json.loads(outputs["list"])
    said["command_list"]["_meta"].pop("profile", None)
    for source, pattern in CLI_PATTERNS:
        lines = outputs[(source, pattern)].splitlines()
        assert lines[0].strip().startswith("hosts ("), lines
        said["cli"][(source, pattern)] = [line.strip() for line in lines[1:] if line.strip()]
    return said


def strict(value: Any) -> Any:
    """A form in which equal means equal type too (Python has 1 == 1.0 == True)."""
    if isinstance(value, dict):
        return {"dict": {key: strict(item) for key, item in value.items()}}
    if isinstance(value, list):
        return {"list": [strict(item) for item in value]}
    return (type(value).__name__, value)


def _from_ansible(value: Any) -> Any:
    """ansible-inventory marks text it did not read from the file as such (`{"__ansible_unsafe":
    TEXT}`: here the text of a bytes literal); the value is TEXT."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: _from_ansible(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_from_ansible(item) for item in value]
    return value


def _as_json(value: Any) -> Any:
    """Our document through JSON, as ansible-inventory writes it (dates in ISO form)."""
    return json.loads(json.dumps(value, default=lambda obj: obj.isoformat()))


def load(source: str) -> Inventory:
    return load_inventory(FIXTURES / source)


@pytest.mark.parametrize("source", SOURCES)
def test_list_matches_ansible_inventory(ansible: dict[str, Any], source: str) -> None:
    """Hosts, groups (direct hosts, children, in order) and every host's merged variables."""
    theirs = _from_ansible(ansible["list"][source])
    ours = _as_json(load(source).to_ansible_list())
    assert set(ours) == set(theirs)
    for group in theirs:
        if group != "_meta":
            assert ours[group] == theirs[group], group
    assert sorted(ours["_meta"]["hostvars"]) == sorted(theirs["_meta"]["hostvars"])
    for host, variables in theirs["_meta"]["hostvars"].items():
        assert strict(ours["_meta"]["hostvars"][host]) == strict(variables), host


def test_value_types_are_ansibles(ansible: dict[str, Any]) -> None:
    """Spot checks that make the comparison above readable: the same values, as Ansible has
    them, for [group:vars] (literal_eval, no shlex) and host lines (shlex, then literal_eval)."""
    theirs = _from_ansible(ansible["list"]["ini_types/hosts"])["_meta"]["hostvars"]
    db, web = theirs["dba"], theirs["web01"]
    expected_db = {
        "port": 6000,
        "l": [1, 2],
        "f": False,
        "n": None,
        "v": 12.0,
        "t": "hello world",
        "c": "x # not a comment: x is not a literal",
        "i": 7,
        "q": "1",
        "sq": "two words",
        "s": [1],
        "tp": [1],
        "cx": "3j",
        "e": "...",
        "b": "bytes",
        "blank": "",
    }
    for key, value in expected_db.items():
        assert strict(db[key]) == strict(value), key
    expected_web = {"digits": 1, "sci": 1000.0, "cplx": "(1+2j)", "pair": [1, 2], "empty": ""}
    for key, value in expected_web.items():
        assert strict(web[key]) == strict(value), key
    ours = load("ini_types/hosts").hosts
    assert strict(ours["dba"].vars["port"]) == strict(6000)
    assert strict(ours["web01"].vars["digits"]) == strict(1)


@pytest.mark.parametrize("source", sorted(PATTERNS))
def test_patterns_match_ansible(ansible: dict[str, Any], source: str) -> None:
    """The same hosts in the same order, for every pattern form both support."""
    inventory = load(source)
    for pattern in PATTERNS[source]:
        theirs = ansible["patterns"][source][pattern]
        assert isinstance(theirs, list) and theirs, (pattern, theirs)
        ours = [host.name for host in inventory.select(pattern)]
        assert ours == theirs, pattern


def test_reference_is_what_the_commands_print(ansible: dict[str, Any]) -> None:
    """`ansible-inventory --list` and `ansible PATTERN --list-hosts` themselves agree with the
    reference script, and with this tool."""
    assert ansible["command_list"] == ansible["list"][COMMAND_LIST]
    for source, pattern in CLI_PATTERNS:
        assert ansible["cli"][(source, pattern)] == ansible["patterns"][source][pattern]
        assert [h.name for h in load(source).select(pattern)] == ansible["cli"][(source, pattern)]


def test_stricter_than_ansible_on_patterns_that_match_nothing(ansible: dict[str, Any]) -> None:
    """Documented difference (README, docs/inventory.md): Ansible warns and drops the term;
    this tool refuses the pattern."""
    for source, patterns in STRICTER.items():
        inventory = load(source)
        for pattern in patterns:
            theirs = ansible["patterns"][source][pattern]
            with pytest.raises(InventoryError) as info:
                inventory.select(pattern)
            assert "--host" in str(info.value), pattern
            if pattern == "gpus[9]":
                assert "No hosts matched the subscripted pattern" in theirs["error"]
                assert "subscript [9] is out of range" in str(info.value)
            else:
                assert isinstance(theirs, list), (pattern, theirs)
    assert ansible["patterns"]["yaml_tree/hosts.yaml"]["nosuch"] == []


def test_files_no_parser_reads_are_refused_by_both(ansible: dict[str, Any], tmp_path: Path) -> None:
    """Neither YAML nor INI reads these: Ansible (unparsed inventories made fatal) fails, and
    this tool says what each parser said, in one line."""
    for name, text in UNREADABLE.items():
        assert "inventory" in ansible["unreadable"][name]["error"], ansible["unreadable"][name]
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InventoryError) as info:
            load_inventory(path)
        message = str(info.value)
        assert "\n" not in message
        assert "read as YAML" in message and "read as INI" in message, message


def test_invoke_inventory_json_has_ansibles_variables(
    ansible: dict[str, Any], tmp_path: Path
) -> None:
    """The task layer (`invoke inventory --json`) shows the same merged variables."""
    source = "ini_types/hosts"
    proc = run_invoke(
        ["inventory", "-i", str(FIXTURES / source), "--json"], invoke_env(None, tmp_path)
    )
    assert proc.returncode == 0, proc.stderr
    doc = json_of(proc)
    theirs = _from_ansible(ansible["list"][source])["_meta"]["hostvars"]
    assert sorted(doc["hosts"]) == sorted(load(source).hosts)
    for host, entry in doc["hosts"].items():
        assert strict(entry["vars"]) == strict(theirs.get(host, {})), host
    # Unlike `ansible-inventory --list`, it lists every group, empty ones too, and each
    # group's hosts include its children's (docs/inventory.md).
    assert doc["groups"]["prod"]["hosts"] == [
        "web01",
        "web02",
        "web03",
        "web04",
        "dba",
        "dbb",
        "dbc",
    ]
    assert "prod" not in ansible["list"][source] or "hosts" not in ansible["list"][source]["prod"]

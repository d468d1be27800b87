"""Issue #35's edges of input, as tables: every value that reaches a timer is bounded, a long
path is one line, invoke's own parser and config errors take the tool's error path, and
serve-check's evidence names only processes proven to be the server.

Real parts: the `invoke` command runs as a subprocess (tasks.py, invoke's parser, its config
loading); serve-check's process selection is the host script's own pure function, given
listeners and processes as /proc would show them. Nothing is simulated but those tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cli import errors as cli_errors
from sm120kit.errors import Sm120Error
from sm120kit.remote import serve_probe
from sm120kit.settings import BY_NAME, SETTINGS, duplicate_keys, parse, resolve
from tests.conftest import invoke_env, json_of, run_invoke

# ---------------------------------------------------------------- every timer value bounded

#: Values that parse as numbers but would overflow a timer or never end a loop.
HUGE = ["1e11", "1e22", 1e11, 1e22, 10**30, "99999999999999999999"]


@pytest.mark.parametrize(
    "setting", [s for s in SETTINGS if s.kind in ("int", "float")], ids=lambda s: s.name
)
@pytest.mark.parametrize("value", HUGE, ids=repr)
def test_huge_numbers_are_refused_naming_the_setting(setting: Any, value: Any) -> None:
    if setting.kind == "int" and isinstance(value, (float, str)) and "e" in str(value):
        value = int(float(value))  # a whole number too big, not a malformed one
    with pytest.raises(Sm120Error) as caught:
        parse(setting, value, "test.yaml")
    message = str(caught.value)
    assert message.startswith(f"setting {setting.name} (test.yaml): must be <= "), message
    assert "\n" not in message and len(message) < 300


@pytest.mark.parametrize("name", ["lock_stale_after", "cache.wait_timeout", "connect_timeout"])
def test_the_largest_accepted_value_reaches_a_timer(name: str) -> None:
    """The bound is below what threading's waits take (the heartbeat and the cache wait)."""
    import threading

    top = parse(BY_NAME[name], str(BY_NAME[name].maximum), "t")
    assert top <= threading.TIMEOUT_MAX
    threading.Event().wait(min(top, 0.0))  # no OverflowError for the type either


@pytest.mark.parametrize(
    ("length", "part"), [(5000, 10), (4097, 10), (300, 300), (257, 256)], ids=str
)
@pytest.mark.parametrize("name", [s.name for s in SETTINGS if s.kind in ("path", "controller")])
def test_long_paths_are_one_line(name: str, length: int, part: int) -> None:
    parts = ["a" * part] * (length // (part + 1) + 1)
    path = ("/" + "/".join(parts))[:length]
    with pytest.raises(Sm120Error) as caught:
        resolve([], {BY_NAME[name].env: path})
    message = str(caught.value)
    assert message.startswith(f"setting {name} (") and "characters (at most" in message
    assert "\n" not in message and len(message) < 400


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--timeout", "1e11"),
        ("--timeout", "1e22"),
        ("--timeout", "-5"),
        ("--timeout", "nan"),
        ("--forks", "100000000000"),
        ("--pid", "99999999999"),
        ("--pid", "4194305"),
    ],
)
def test_huge_flags_are_one_line_exit_1(tmp_path: Path, flag: str, value: str) -> None:
    proc = run_invoke(
        ["serve-check", "-H", "local", flag, value, "--json"], invoke_env(None, tmp_path)
    )
    assert proc.returncode == 1, proc.stderr
    assert json_of(proc)["error"].startswith(f"{flag}: ")
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- invoke's own errors


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["facts", "-H", "local", "--bogus"], "--bogus: not a flag of this task"),
        (["facts", "--json", "--max-jobs", "3", "-H", "local"], "--max-jobs: not a flag"),
        (["facts", "--json", "-H"], "--host: needs a value"),
        (["serve-check", "--json", "-H", "local", "--timeout"], "--timeout: needs a value"),
        (
            ["preflight", "-H", "local", "python", "-m", "sglang.launch_server"],
            "launch words go after --",
        ),
        (["nosuchtask", "--json"], "No idea what 'nosuchtask'"),
    ],
)
@pytest.mark.parametrize("as_json", [True, False])
def test_parser_errors_take_the_error_path(
    tmp_path: Path, args: list[str], says: str, as_json: bool
) -> None:
    if as_json and "--json" not in args:
        args = [*args[:1], "--json", *args[1:]]
    if not as_json:
        args = [a for a in args if a != "--json"]
    proc = run_invoke(args, invoke_env(None, tmp_path), timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    if as_json:
        doc = json_of(proc)
        assert doc["hosts"] == {} and says in doc["error"]
    else:
        assert proc.stdout == ""


def test_json_wanted_only_before_the_launch() -> None:
    assert cli_errors.json_wanted(["facts", "--json"])
    assert not cli_errors.json_wanted(["preflight", "--", "x", "--json"])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sm120kit:\n  forks: 3\n  forks: 4\n", "line 3: sm120kit.forks given twice"),
        (
            "sm120kit:\n  cache:\n    wait_timeout: 5\n    wait_timeout: 6\n",
            "line 4: sm120kit.cache.wait_timeout given twice",
        ),
        ("sm120kit: 5\n", "sm120kit: expected a mapping of settings, got 5"),
        ("sm120kit: [1, 2]\n", "sm120kit: expected a mapping of settings"),
        ("sm120kit:\n  cache: 5\n", "setting cache ("),
        ("sm120kit:\n  wait_timout: 5\n", "sm120kit.wait_timout: unknown setting"),
        ("sm120kit:\n  cache:\n    controler: x\n", "sm120kit.cache.controler: unknown setting"),
    ],
    ids=lambda v: v[:30],
)
def test_config_sections_are_checked(tmp_path: Path, text: str, says: str) -> None:
    """Through the real invoke: the project's invoke.yaml holds a mapping, so a non-mapping
    in `-f FILE` is invoke's merge conflict; the error names the file, exit 1, one JSON."""
    conf = tmp_path / "conf.yaml"
    conf.write_text(text)
    proc = run_invoke(
        ["-f", str(conf), "facts", "-H", "local", "--json"], invoke_env(None, tmp_path)
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json_of(proc)
    assert says in doc["error"] and str(conf) in doc["error"], doc["error"]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_duplicates_outside_the_section_are_invokes(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(json.dumps({"run": {"echo": True}}) + "\n")
    duplicate_keys(str(conf))  # nothing of ours: no error
    conf.write_text("other: 1\nother: 2\nsm120kit:\n  forks: 2\n")
    duplicate_keys(str(conf))


# ---------------------------------------------------------------- serve-check evidence

LISTEN = [
    {"port": 8000, "address": "127.0.0.2", "inode": 1},  # another server, another address
    {"port": 9000, "address": "0.0.0.0", "inode": 2},
]
OWNERS = {1: {111}, 2: {222}}
PROCS = {
    111: ["/usr/sbin/nginx", "-g", "daemon off;"],
    333: ["python3", "-m", "sglang.launch_server"],
}


@pytest.mark.parametrize(
    ("url", "args", "addresses", "alive", "pids", "missing", "how"),
    [
        # The URL's address is not where the other process listens: not the server.
        ("http://127.0.0.1:8000", {}, {"127.0.0.1"}, {111, 333}, {333}, [], "launches"),
        ("http://[::1]:8000", {}, {"::1"}, {111, 333}, {333}, [], "launches"),
        # The same address, a wildcard, or the mapped form: that is the server.
        ("http://127.0.0.2:8000", {}, {"127.0.0.2"}, {111}, {111}, [], "listening"),
        ("http://10.0.0.5:9000", {}, {"10.0.0.5"}, {222}, {222}, [], "listening"),
        # --process-match is not overridden by a listener on the port.
        (
            "http://127.0.0.2:8000",
            {"process_match": "sglang"},
            {"127.0.0.2"},
            {111, 333},
            {333},
            [],
            "command line",
        ),
        # An impossible --pid is reported missing, never replaced by the port's owner.
        ("http://127.0.0.2:8000", {"pid": 4194304}, {"127.0.0.2"}, {111}, set(), [4194304], None),
        ("http://0.0.0.0:9000", {"pid": 77}, {"0.0.0.0"}, {222}, set(), [77], None),
        # The server serve-check launched is the one watched, whatever holds the port.
        ("http://127.0.0.2:8000", {"pid": 333}, {"127.0.0.2"}, {111, 333}, {333}, [], "pid 333"),
        ("http://127.0.0.1:9000", {"pids": [333]}, {"127.0.0.1"}, {222, 333}, {333}, [], "pid"),
    ],
)
def test_only_proven_processes_are_the_server(
    url: str,
    args: dict[str, Any],
    addresses: set[str],
    alive: set[int],
    pids: set[int],
    missing: list[int],
    how: str | None,
) -> None:
    port = serve_probe._port_of(url)
    got, found_by, gone = serve_probe._select(
        port,
        LISTEN,
        OWNERS,
        {"url": url, **args},
        set(),
        addresses=addresses,
        exists=lambda pid: pid in alive,
        processes={p: PROCS.get(p, ["sleep"]) for p in alive},
    )
    assert got == pids and gone == missing
    assert (found_by is None) if how is None else (how in found_by), found_by


@pytest.mark.parametrize(
    ("address", "url_addresses", "serves"),
    [
        ("0.0.0.0", {"127.0.0.1"}, True),
        ("::", {"127.0.0.1"}, True),
        ("::ffff:127.0.0.1", {"127.0.0.1"}, True),
        ("127.0.0.2", {"127.0.0.1"}, False),
        ("192.168.1.4", {"127.0.0.1", "::1"}, False),
        ("::1", {"127.0.0.1", "::1"}, True),
    ],
)
def test_serves_url(address: str, url_addresses: set[str], serves: bool) -> None:
    assert serve_probe.serves_url(address, url_addresses) is serves


# ---------------------------------------------------------------- preflight input

SHELL_LAUNCHES = [
    "python -m sglang.launch_server --model-path m; rm -rf /tmp/x",
    "python -m sglang.launch_server --model-path m | tee log",
    "python -m sglang.launch_server --model-path m && echo ok",
    "python -m sglang.launch_server --model-path m || true",
    "python -m sglang.launch_server --model-path m & sleep 1",
    "python -m sglang.launch_server --model-path 'm\nrm -rf /'",
    "python -m sglang.launch_server --model-path `cat /etc/m`",
    "python -m sglang.launch_server --model-path $(cat /etc/m)",
    "python -m sglang.launch_server --model-path m > /tmp/log",
    "python -m sglang.launch_server --tp 2;--port 8001",
]


@pytest.mark.parametrize("text", SHELL_LAUNCHES)
def test_shell_syntax_in_a_launch_is_refused(text: str) -> None:
    from sm120kit.preflight.launch import launch_words

    with pytest.raises(Sm120Error) as caught:
        launch_words(text, ["invoke"])
    message = str(caught.value)
    assert message.startswith("--launch: shell syntax") and "\n" not in message
    # The same words after -- (as a shell that was told to pass them on would give them).
    import shlex

    words = shlex.split(text)
    with pytest.raises(Sm120Error, match="shell syntax"):
        launch_words(None, ["invoke", "preflight", "--", *words])


@pytest.mark.parametrize(
    "text",
    [
        "python -m sglang.launch_server --model-path /m --tp 2",
        "sglang serve --model-path '/models/a b' --chat-template x.jinja",
        "python -m sglang.launch_server --model-path org/name --json-model-override-args {}",
    ],
)
def test_plain_launches_pass(text: str) -> None:
    from sm120kit.preflight.launch import launch_words

    assert launch_words(text, ["invoke"])


def _model(tmp_path: Path, kind: str) -> str:
    path = tmp_path / kind
    if kind == "null":
        return "/dev/null"
    if kind == "empty_dir":
        path.mkdir()
    elif kind == "no_config":
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"x" * 16)
    elif kind in ("hf", "mistral"):
        path.mkdir()
        (path / ("config.json" if kind == "hf" else "params.json")).write_text("{}")
    elif kind == "text_file":
        path.write_text("not a model\n")
    elif kind == "gguf_magic":
        path.write_bytes(b"GGUF" + b"\0" * 12)
    elif kind == "gguf_suffix":
        path = tmp_path / "m.gguf"
        path.write_bytes(b"\0" * 8)
    elif kind == "missing":
        pass
    return str(path)


@pytest.mark.parametrize(
    ("kind", "status", "says"),
    [
        ("null", "fail", "not a regular file or directory"),
        ("empty_dir", "fail", "an empty directory"),
        ("no_config", "fail", "without config.json"),
        ("text_file", "fail", "not GGUF"),
        ("missing", "fail", "does not exist"),
        ("hf", "pass", "GB in"),
        ("mistral", "pass", "GB in"),
        ("gguf_magic", "pass", "GB in"),
        ("gguf_suffix", "pass", "GB in"),
    ],
)
def test_a_model_path_that_is_no_model_fails(
    tmp_path: Path, kind: str, status: str, says: str
) -> None:
    """The host probe's own reading (a real file system) and the check's verdict."""
    from sm120kit.preflight.host import model_check
    from sm120kit.preflight.launch import parse_launch
    from sm120kit.remote.preflight_probe import model_state

    path = _model(tmp_path, kind)
    verdict = model_check(parse_launch(["--model-path", path]), {"model": model_state(path)})
    assert verdict["status"] == status, verdict
    assert says in verdict["reason"] and "\n" not in verdict["reason"]


@pytest.mark.parametrize(
    ("role", "name", "accepted"),
    [
        ("attention", "FA3", "fa3"),
        ("attention", "FlashInfer", "flashinfer"),
        ("attention", "TRITON", "triton"),
        ("moe", "Triton", "triton"),
        ("moe", "FLASHINFER_CUTLASS", "flashinfer_cutlass"),
    ],
)
@pytest.mark.parametrize("version", ["0.5.23", None])
def test_a_backend_in_the_wrong_case_is_refused(
    role: str, name: str, accepted: str, version: str | None
) -> None:
    """sglang's argparse `choices` are exact: refused whatever sglang is installed."""
    from sm120kit.preflight.rules import ATTENTION_BACKENDS, MOE_BACKENDS
    from sm120kit.preflight.verdicts import backend_verdict

    table = ATTENTION_BACKENDS if role == "attention" else MOE_BACKENDS
    assert accepted in table
    verdict = backend_verdict(role, name, table, {}, (12, 0), version)
    assert verdict["status"] == "fail", verdict
    assert repr(accepted) in verdict["reason"] and "case-sensitive" in verdict["reason"]


# ---------------------------------------------------------------- cache.key without an env


def test_cache_key_without_the_build_env_guesses_no_key(fleet: Any, tmp_path: Path) -> None:
    """On a host whose build env does not exist, cache.key shows torch and the key as unknown
    (the recipe's `2.13.0` is not the `2.13.0+cpu` the build hashes), never a made-up key.
    Real: the sshd fleet host and the task; its GPU is the fleet's nvidia-smi stub."""
    from tests.real.test_build_op import invoke, write_inventory

    inventory = write_inventory(tmp_path, fleet, {"fresh": {}})
    proc = invoke(tmp_path, fleet, inventory, "cache.key", "--package", "minikernel", "-H", "fresh")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    host = json_of(proc)["hosts"]["fresh"]
    rows = dict(map(tuple, host["inputs"]))
    assert host["key"] is None and host["predicted"] is True
    assert rows["torch"] == rows["key"] == "unknown until the build env exists"
    assert "torch unknown" in host["key_unknown"]
    assert rows["package"] == "minikernel"  # every other input is shown as it will be


@pytest.mark.parametrize(
    ("env", "unknown"),
    [(None, True), ("planned", True), ("real", False)],
)
def test_key_unknown_table(env: str | None, unknown: bool) -> None:
    from types import SimpleNamespace

    from sm120kit.builds.inputs import key_unknown
    from sm120kit.state import PyEnv

    made = None
    if env is not None:
        made = PyEnv("/e", "/e/bin/python", "3.11.7", "cp311", "linux_x86_64", "2.13.0+cpu",
                     None, True, [], planned=env == "planned")  # fmt: skip
    got = key_unknown(SimpleNamespace(env=made))  # type: ignore[arg-type]
    assert (got is not None) is unknown


# ---------------------------------------------------------------- #32: no pass over nothing


@pytest.mark.parametrize(
    ("probe", "status", "says"),
    [
        ({"error": "no python at /srv/env/bin/python"}, "unknown", "could not be read"),
        ({"modules": []}, "unknown", "none of its modules was read"),
        (
            {"modules": "empty-files"},
            "fail",
            "no such extension module",
        ),
        ({"modules": "no-device-code"}, "unknown", "hold no device code"),
        ({"modules": "sm120"}, "pass", "SASS sm_120"),
        ({"modules": "sm90"}, "fail", "no code for 12.0"),
    ],
    ids=["no-env", "nothing-read", "no-module", "no-device-code", "sm120", "sm90"],
)
def test_no_backend_verdict_passes_over_an_empty_list(
    probe: dict[str, Any], status: str, says: str
) -> None:
    from sm120kit.preflight.rules import ATTENTION_BACKENDS
    from sm120kit.preflight.verdicts import backend_verdict

    entry = ATTENTION_BACKENDS["fa3"]
    assert entry.kind == "so" and entry.modules
    kinds = {
        "empty-files": [],
        "no-device-code": [{"rel": "x/flash_ops.so", "sass": [], "ptx": []}],
        "sm120": [{"rel": "x/flash_ops.so", "sass": ["sm_120"], "ptx": []}],
        "sm90": [{"rel": "x/flash_ops.so", "sass": ["sm_90a"], "ptx": []}],
    }
    if isinstance(probe.get("modules"), str):
        files = kinds[probe["modules"]]
        probe = {
            "modules": [
                {"dist": list(m.dist), "prefix": m.prefix, "installed_dist": m.dist[0],
                 "version": "1", "files": files}
                for m in entry.modules
            ]
        }  # fmt: skip
    verdict = backend_verdict("attention", "fa3", ATTENTION_BACKENDS, probe, (12, 0), "0.5.23")
    assert verdict["status"] == status, verdict
    assert says in verdict["reason"], verdict["reason"]
    assert "(SASS )" not in verdict["reason"]


# ---------------------------------------------------------------- #32: preflight's default env


def test_preflight_default_env_is_the_serving_stack_env(fleet: Any, tmp_path: Path) -> None:
    """Without --python, preflight reads the host's serving stack env (envs/stack-<lock>),
    not the build's managed env; where it does not exist yet, attention verdicts are
    "unknown" (nothing read), never a pass. Real: the sshd fleet host (gpu1, its GPU the
    fleet's nvidia-smi stub: two RTX PRO 6000) and the task."""
    argv = ["preflight", "-H", "gpu1", "--json", "--", "python", "-m", "sglang.launch_server",
            "--model-path", "org/model", "--attention-backend", "fa3"]  # fmt: skip
    proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=300)
    host = json_of(proc)["hosts"]["gpu1"]
    assert host["python_source"] == "serving stack env", host["python_source"]
    assert "/envs/stack-" in host["python"] and "torch" not in host["python"].split("/")[-3]
    checks = {c["check"]: c for c in host["preflight"]["checks"]}
    fa3 = checks["attention_backend"]
    assert fa3["status"] != "pass" and "(SASS )" not in fa3["reason"], fa3

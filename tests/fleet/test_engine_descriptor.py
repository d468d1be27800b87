"""The engine as data (sm120kit/engines.py): one typed descriptor per engine carries its
stack side (top distribution, smoke's import, JIT rules) and its launch side (launchers,
option table, in-env resolver, serve argv, verdict family); a third engine is a descriptor
plus tables. `--engine NAME` overrides the host/group var ``stack``; a bare ARGS launch is
read with the host's engine's parser.

The third engine here ("tfserve", whose top-level distribution is the vLLM lock's real
transformers 5.20.2) is registered from data only: a copy of the shipped recipes offers it
beside vllm on the cu13 line, its lock is the shipped vLLM lock with that top, and it walks
recipe resolution, a real plan (check mode) over the SSH fleet, and preflight's launch
reading and table verdicts. Only the GPU is simulated (facts given, or the fleet's stub
nvidia-smi); the engine's in-env resolver answer is given as data (it has no real env).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit import engines
from sm120kit.engines import VLLM, Engine, engine_of
from sm120kit.errors import RecipeError, Sm120Error
from sm120kit.inventory.host import Host
from sm120kit.packages import stack as serving
from sm120kit.plays import provision
from sm120kit.plays.plan import PlanOptions
from sm120kit.plays.preflight import ENGINE_CHECKS, host_launch
from sm120kit.plays.serve_launch import server_argv
from sm120kit.preflight import vllm_checks
from sm120kit.preflight.launch import check_engine, parse_launch
from sm120kit.preflight.verdicts import resolution
from sm120kit.recipes.select import host_engine, load_recipes, resolve_for_host
from sm120kit.remote import preflight_probe
from sm120kit.remote.lib import warm
from sm120kit.remote.lib.targets import RESOLVER_NAMES
from sm120kit.runner.connection import ConnectOptions
from sm120kit.runner.pool import Runner, RunOptions
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.sglang_env import sglang_venv

REPO = Path(__file__).resolve().parents[2]
FACTS = {"gpu": {"driver_version": "580.95.05", "gpus": [{"compute_cap": "12.0"}]}}

TFSERVE = Engine(
    name="tfserve",
    distribution="transformers",
    module="transformers",
    source="a test engine, data only",
    modules=("tfserve.server",),
    cli="tfserve",
    positional_model=True,
    options={
        "model_path": (("--model",), str),
        "tp": (("--num-shard",), int),
        "port": (("--port",), int),
        "attention_backend": (("--attention",), str),
    },
    default_port=8080,
    default_host="0.0.0.0",
    resolver="tfserve_args",
    serve_argv=("-m", "tfserve.server"),
)
TFSERVE_TABLES = vllm_checks.Tables(
    version="1.0",
    title="tfserve",
    project="tfserve",
    attention={
        "PAGED": vllm_checks.VllmBackend(
            "PAGED", lambda cc: cc >= (8, 0), "capability >= 8.0", "tfserve/attn.py:1"
        )
    },
)


@pytest.fixture
def third(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The third engine and its tables, registered for this test only."""
    monkeypatch.setattr(engines, "ENGINES", dict(engines.ENGINES))
    monkeypatch.setattr(vllm_checks, "TABLES", dict(vllm_checks.TABLES))
    engines.register(TFSERVE)
    vllm_checks.TABLES[TFSERVE.name] = TFSERVE_TABLES
    return TFSERVE


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A checkout's recipes and locks whose cu13 line offers tfserve (its own stack line and
    lock: the shipped vLLM lock with transformers==5.20.2 as its top)."""
    root = tmp_path_factory.mktemp("third")
    shutil.copytree(REPO / "recipes", root / "recipes")
    (root / "patches").symlink_to(REPO / "patches")
    lock_dir = root / "locks" / "tfserve-1"
    lock_dir.mkdir(parents=True)
    for f in (REPO / "locks" / "vllm-0.33.0").glob("*.toml"):
        text = f.read_text().replace('top = "vllm==0.33.0"', 'top = "transformers==5.20.2"')
        (lock_dir / f.name).write_text(text)
    stacks = root / "recipes" / "shared" / "stacks.toml"
    text = stacks.read_text()
    text = text.replace(
        'engines = { vllm = "cu13-vllm" } }',
        'engines = { vllm = "cu13-vllm", tfserve = "cu13-tfserve" } }',
    )
    text += (
        '\n[stacks.cu13-tfserve]\ntop = "transformers==5.20.2"\nlocks = "locks/tfserve-1"\n'
        'torch = { version = "2.14.0", index = "pypi", cuda = "13.0" }\n'
        'reason = "a third engine, as data"\n'
    )
    stacks.write_text(text)
    yield root


def _host(**vars_: Any) -> Host:
    return Host("gpu1", vars=vars_, var_sources={k: "inventory: host gpu1" for k in vars_})


def test_a_third_engine_is_data_through_recipes_smoke_and_launches(
    third: Engine, base: Path
) -> None:
    """Registered from data: the recipe offers it, smoke's probe knows its import, a launch
    with its launcher or bare ARGS on its host is read with its option table."""
    recipes = load_recipes(base / "recipes")
    res = resolve_for_host(recipes, _host(stack="tfserve"), FACTS)
    assert res.recipe.stack is not None and res.recipe.stack.top == "transformers==5.20.2"
    assert engines.for_top(res.recipe.stack.top) is third
    assert {"top": "transformers", "module": "transformers", "jit": {}} in (
        serving.probe_knowledge(())["engines"]
    )
    launch = parse_launch(["tfserve", "serve", "org/m", "--num-shard", "2"])
    assert (launch.engine, launch.model_path, launch.tp, launch.port) == (
        "tfserve",
        "org/m",
        2,
        8080,
    )
    bare = host_launch(
        _Ctx(_host(stack="tfserve")), PlanOptions(), parse_launch(["--num-shard", "4"])
    )
    assert (bare.engine, bare.tp) == ("tfserve", 4)
    assert server_argv("/e/bin/python", launch) == [
        "/e/bin/python", "-m", "tfserve.server", "--model", "org/m", "--num-shard", "2"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "status"), [("PAGED", "pass"), ("FLASH", "unknown"), (None, "skip")]
)
def test_a_third_engines_launch_is_judged_by_its_tables(
    third: Engine, backend: str | None, status: str
) -> None:
    """The table judge (Engine.verdicts "tables"): the probe asks its resolver, its answer
    (given here as data) is read by the one resolution reader, its backend by its table."""
    launch = parse_launch(["tfserve", "serve", "m"] + (["--attention", backend] if backend else []))
    ask, judge = ENGINE_CHECKS[third.verdicts]
    request = ask(launch, "/env/bin/python", (12, 0), resolve=True, memory_mib=None)
    assert request["resolve"]["resolver"] == "tfserve_args" and request["dists"] == ["transformers"]
    answered = {"attention_backend": backend} if backend else {}
    probe = {
        "python": "/env/bin/python",
        "dists": {"transformers": {"installed": True, "version": "5.20.2"}},
        "resolved": {"ran": True, "version": "1.0", "gpu": "g", "cases": [{"backends": answered}]},
    }
    verdict = judge(launch, FACTS, probe, (12, 0), "serving env", False)
    checks = {c["check"]: c for c in verdict["checks"]}
    assert verdict["engine"] == "tfserve"
    assert checks["serving_env"]["status"] == "pass"
    assert checks["attention_backend"]["status"] == status, checks["attention_backend"]
    assert checks["tfserve_resolution"]["reason"].startswith("resolved by: tfserve 1.0 ")


def test_a_third_engine_plans_over_ssh(
    third: Engine, base: Path, fleet: Fleet, tmp_path: Path
) -> None:
    """`plan --engine tfserve` on a fleet host (real sshd, check mode): the stack step names the
    third engine's lock; nothing is installed."""
    vars_ = {
        **fleet.all_vars(fleet.by_name("gpu1")),
        "work_root": str(tmp_path / "work"),
        "target_driver": "580.95.05",
        "target_arch": "12.0",
    }
    runner = Runner(
        RunOptions(
            run_root=str(tmp_path / "runs"),
            check_mode=True,
            connect=ConnectOptions(known_hosts=str(fleet.known_hosts)),
        )
    )
    opts = PlanOptions(recipes_dir=str(base / "recipes"), engine="tfserve")
    result = runner.run("plan", [Host("gpu1", vars=vars_)], provision.plan_or_provision_op(opts))
    host = result.hosts["gpu1"]
    stack = next(s for s in host.steps if s.name == "stack")
    assert stack.status == "changed", stack
    assert "locked distributions of transformers==5.20.2" in stack.message
    assert "envs/stack-transformers-5.20.2-cp311" in stack.message
    assert not (tmp_path / "work" / "envs").exists()


# ------------------------------------------------------------------ --engine and the var


@pytest.mark.parametrize(
    ("var", "flag", "top", "where"),
    [
        ("vllm", None, "vllm==0.33.0", "inventory: host gpu1 (stack)"),
        ("vllm", "sglang", "sglang==0.5.23", "--engine"),
        ("sglang", "vllm", "vllm==0.33.0", "--engine"),
        (None, "vllm", "vllm==0.33.0", "--engine"),
        (None, None, "sglang==0.5.23", ""),
    ],
)
def test_the_engine_flag_wins_over_the_stack_var(
    var: str | None, flag: str | None, top: str, where: str
) -> None:
    host = _host(**({"stack": var} if var else {}))
    assert host_engine(host, flag)[1] == where
    res = resolve_for_host(load_recipes(), host, FACTS, engine=flag)
    assert res.recipe.stack is not None and res.recipe.stack.top == top


def test_an_engine_flag_not_offered_is_one_line_naming_the_flag() -> None:
    """r575 (driver 575) offers no vLLM line: the flag is named, as the var is."""
    facts = {"gpu": {"driver_version": "575.57.08", "gpus": [{"compute_cap": "12.0"}]}}
    with pytest.raises(RecipeError) as err:
        resolve_for_host(load_recipes(), _host(), facts, engine="vllm")
    text = str(err.value)
    assert "\n" not in text and text.startswith("host gpu1: --engine 'vllm': recipe r575 offers")


@pytest.mark.parametrize("task", ["plan", "provision", "smoke", "preflight"])
def test_an_unknown_engine_flag_is_one_line_before_any_host(task: str, tmp_path: Path) -> None:
    argv = [
        task,
        "-H",
        "nohost.invalid",
        "--engine",
        "tgi",
        *(["--", "--model", "m"] if task == "preflight" else []),
    ]
    proc = run_invoke(argv, invoke_env(None, tmp_path), timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["error: --engine 'tgi': unknown engine; known: sglang, vllm"], proc.stderr


def test_an_engine_flag_against_the_launchers_engine_is_refused() -> None:
    with pytest.raises(Sm120Error) as err:
        check_engine(parse_launch(["vllm", "serve", "m"]), "sglang")
    assert "--engine sglang: the launch 'vllm serve m'... is vllm's" in str(err.value)
    check_engine(parse_launch(["vllm", "serve", "m"]), "vllm")
    check_engine(parse_launch(["--model", "m"]), "vllm")


@pytest.mark.parametrize(
    ("var", "flag", "engine", "tp"),
    [("vllm", None, "vllm", 2), (None, "vllm", "vllm", 2), ("vllm", "sglang", "sglang", 1), (None, None, "sglang", 1)],
)  # fmt: skip
def test_a_bare_launch_is_read_by_the_hosts_engine(
    var: str | None, flag: str | None, engine: str, tp: int
) -> None:
    """``-- --model m -tp 2``: -tp is vLLM's spelling (sglang's parser keeps it as a word)."""
    host = _host(**({"stack": var} if var else {}))
    got = host_launch(
        _Ctx(host), PlanOptions(engine=flag), parse_launch(["--model", "m", "-tp", "2"])
    )
    assert (got.engine, got.tp, got.model_path) == (engine, tp, "m")
    named = parse_launch(["python", "-m", "sglang.launch_server", "--model", "m"])
    assert host_launch(_Ctx(host), PlanOptions(engine=flag), named) is named


def test_a_bare_launch_on_a_host_with_an_unknown_stack_var_is_one_line() -> None:
    from sm120kit.errors import HostFailed

    with pytest.raises(HostFailed) as err:
        host_launch(_Ctx(_host(stack="tgi")), PlanOptions(), parse_launch(["--model", "m"]))
    assert str(err.value) == (
        "inventory: host gpu1 (stack) 'tgi': unknown engine; known: sglang, vllm"
    )


@pytest.mark.parametrize(
    ("words", "argv"),
    [
        (["vllm", "serve", "org/m", "-tp", "2"],
         ["-m", "vllm.entrypoints.cli.main", "serve", "--model", "org/m", "-tp", "2"]),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
         ["-m", "vllm.entrypoints.cli.main", "serve", "--model", "m"]),
        (["python", "-m", "sglang.launch_server", "--model-path", "m"],
         ["-m", "sglang.launch_server", "--model-path", "m"]),
    ],
)  # fmt: skip
def test_serve_check_starts_the_engines_own_launcher(words: list[str], argv: list[str]) -> None:
    assert server_argv("/e/bin/python", parse_launch(words)) == ["/e/bin/python", *argv]


def test_one_resolution_reader_for_every_engine() -> None:
    """verdicts.resolution, parameterised by the engine: the same shape, the engine's words."""
    doc = {"ran": True, "version": "0.33.0", "gpu": "g", "cases": [{"backends": {"a": 1}}]}
    got = resolution({"resolved": doc}, VLLM)
    assert got["by"] == "vllm 0.33.0 engine config and attention selector"
    assert got["backends"] == {"a": 1} and got["after"] == []
    assert resolution({}, VLLM)["by"] == "the tool's tables (vLLM's resolution was not asked)"
    assert resolution({})["by"] == "the tool's rules (sglang's resolution was not asked)"
    assert engine_of(["tfserve", "serve", "m"]) is None  # not registered outside its test


def test_a_bare_launch_over_ssh_reads_the_hosts_stack_var(fleet: Fleet, tmp_path: Path) -> None:
    """`invoke preflight -H gpu1 -- --model M -tp 2` with gpu1's var ``stack: vllm``, in the
    real sglang wheels' venv (no vllm): read by vLLM's table (tp 2, port 8000), judged by the
    table judge, vLLM's resolver asked (through its warm server) and saying why it cannot run."""
    doc = yaml.safe_load(fleet.inventory.read_text())
    doc["all"]["hosts"]["gpu1"]["stack"] = "vllm"
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(yaml.safe_dump(doc))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    argv = ["preflight", "-H", "gpu1", "--python", str(sglang_venv()), "--json", "--",
            "--model", str(model), "-tp", "2"]  # fmt: skip
    env = invoke_env(fleet, tmp_path, INVOKE_SM120KIT_INVENTORY=str(inventory))
    proc = run_invoke(argv, env, timeout=600)
    assert proc.returncode == 2, proc.stderr
    host = json_of(proc)["hosts"]["gpu1"]
    assert (host["launch"]["engine"], host["launch"]["tp"], host["launch"]["port"]) == (
        "vllm",
        2,
        8000,
    )
    checks = {c["check"]: c for c in host["preflight"]["checks"]}
    assert "vllm is not installed" in checks["serving_env"]["reason"]
    assert "vLLM's resolution could not run" in checks["vllm_resolution"]["reason"]
    assert checks["gpus"]["status"] == "pass"


def test_the_warm_server_serves_a_vllm_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm resolution server is engine-generic: a vLLM request starts vllm_args.py's
    server (this machine's python: torch, no vllm), which answers as a fresh interpreter
    would and exits (nothing warm to keep); its key is not sglang's."""
    short = tempfile.mkdtemp(prefix="pf-", dir="/tmp")  # a unix socket path has 108 bytes
    monkeypatch.setenv("TMPDIR", short)
    monkeypatch.setattr(tempfile, "tempdir", None)
    request = {"cases": [["--model", "/m"]], "cc": [12, 0]}
    try:
        doc = preflight_probe.warm_resolve(
            sys.executable, request, None, ["x"], 30, 120, "vllm_args"
        )
        assert doc is not None and doc["ran"] is False and doc["engine"] == "vllm"
        assert "cannot import vLLM's engine args" in doc["reason"]
        assert "started now" in doc["server"]
        assert doc["gpu"] == "no GPU: torch.cuda faked as one GPU of capability 12.0, 1024 MiB"
        keys = {warm.server_key(sys.executable, None, ["x"], [1], r) for r in RESOLVER_NAMES}
        assert len(keys) == len(RESOLVER_NAMES)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_an_unknown_resolver_is_said_not_run_as_sglangs() -> None:
    model = {"local": True, "form": "hf", "config": {"architectures": ["X"]}}
    doc = preflight_probe._resolve(sys.executable, {"resolver": "tgi_args"}, model, {}, None, False)
    assert doc == {"ran": False, "reason": "no in-env resolver 'tgi_args' on this host's library"}


@dataclass
class _Ctx:
    """What `host_launch` reads of a host context: the host."""

    host: Host

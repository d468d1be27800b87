"""Preflight asks sglang: the backends a launch gets come from sglang's own ServerArgs
resolution run in the serving env (sm120kit/remote/lib/in_target/server_args.py), and fall
back to preflight's tables, marked as such, when it cannot run.

What is real: the in-env script runs in the real sglang 0.5.23 stack venv of the test cache
(tests/support/sglang_env.py: the released wheels, --no-deps, beside the suite's torch 2.13.0
CPU), where sglang's import fails for a missing dependency (psutil): the "could not run" path,
with sglang's own error as the reason. There is no GPU: torch.cuda is faked as one GPU of
capability 12.0 (the driver stub smoke uses).

What is simulated: the table tests below hand `judge` the probe's JSON as sglang's resolution
would answer it (the field names and values of sglang 0.5.23's ServerArgs.resolved_dict()); a
full resolution needs sglang's Python dependencies in the env (not built here yet).
"""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.preflight.launch import parse_launch
from sm120kit.preflight.rules import RESOLVED_FIELDS
from sm120kit.preflight.verdicts import FAKE_MEMORY_MIB, judge, probe_request, resolution
from sm120kit.remote.lib.targets import SERVER_ARGS_SRC, run_target
from sm120kit.remote.preflight_probe import hub_cache, hub_config, resolve
from tests.support.sglang_env import stack_venv

FACTS: dict[str, Any] = {
    "gpu": {
        "present": True,
        "driver_version": "580.95.05",
        "gpus": [{"index": 0, "memory_mib": 32607, "memory_used_mib": 0, "processes": []}],
    }
}
FLASH_OPS = {
    "dist": ["sglang-kernel", "sgl-kernel"],
    "prefix": "sgl_kernel/flash_ops.",
    "installed_dist": "sglang-kernel",
    "version": "0.4.10",
    "files": [
        {"rel": "sgl_kernel/flash_ops.abi3.so", "sass": ["sm_80", "sm_86", "sm_90a"], "ptx": []}
    ],
}
DISTS = {
    "sglang": {"installed": True, "version": "0.5.23", "requires": []},
    "sglang-kernel": {"installed": True, "version": "0.4.10", "requires": []},
    "flashinfer-python": {"installed": True, "version": "0.7.2", "requires": []},
}


def _probe(resolved: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"error": None, "python": "/env/bin/python", "dists": DISTS}
    doc["modules"] = [FLASH_OPS]
    doc["model"] = {"path": "/m", "local": True, "exists": True, "form": "hf", "bytes": 1}
    if resolved is not None:
        doc["resolved"] = resolved
    return doc


def _answer(**backends: str) -> dict[str, Any]:
    return {
        "ran": True,
        "version": "0.5.23",
        "gpu": "no GPU: torch.cuda faked as one GPU of capability 12.0",
        "cases": [{"error": None, "backends": backends}],
    }


def _launch(*flags: str):
    return parse_launch(["python", "-m", "sglang.launch_server", "--model-path", "/m", *flags])


def _status(verdict: dict[str, Any], name: str) -> list[str]:
    return [c["status"] for c in verdict["checks"] if c["check"] == name]


def test_request_carries_the_launch_argv_every_field_and_the_arch() -> None:
    launch = _launch("--attention-backend", "fa3")
    req = probe_request(launch, "/env/bin/python", (12, 0), resolve=True)
    assert req["resolve"] == {
        "cases": [["--model-path", "/m", "--attention-backend", "fa3"]],
        "fields": list(RESOLVED_FIELDS),
        "cc": [12, 0],
        "memory_mib": FAKE_MEMORY_MIB,
        "warm": 900,
    }
    assert probe_request(launch, "/p", (12, 0), True, 97887)["resolve"]["memory_mib"] == 97887
    # Every prebuilt module preflight knows is read, since sglang's choice is learnt then.
    assert {"dist": ["sglang-kernel", "sgl-kernel"], "prefix": "sgl_kernel/flash_ops."} in req[
        "modules"
    ]
    assert "resolve" not in probe_request(launch, None)


def test_sglangs_choice_replaces_the_tables_default() -> None:
    """No flag: sglang's answer (fa3, as if a per-model override chose it) is what is judged,
    and refused citing flash_ops' archs."""
    verdict = judge(_launch(), FACTS, _probe(_answer(attention_backend="fa3")), (12, 0))
    assert verdict["resolved_by"] == "sglang 0.5.23 ServerArgs"
    assert verdict["attention"]["prefill"] == verdict["attention"]["decode"] == "fa3"
    assert verdict["attention"]["how"] == "resolved by: sglang 0.5.23 ServerArgs"
    failed = " ".join(verdict["failed"])
    assert "sgl_kernel/flash_ops.abi3.so" in failed and "sm_90a" in failed
    assert _status(verdict, "sglang_resolution") == ["pass"]


def test_backend_with_sm120_code_passes() -> None:
    answer = _answer(
        attention_backend="flashinfer",
        prefill_attention_backend="None",
        decode_attention_backend="None",
        moe_runner_backend="triton",
    )
    verdict = judge(_launch(), FACTS, _probe(answer), (12, 0))
    assert _status(verdict, "attention_backend") == ["pass"]
    assert _status(verdict, "moe_backend") == ["pass"]
    assert verdict["resolved"]["moe_runner_backend"] == "triton"


def test_sglang_refusing_the_launch_fails_it_with_sglangs_words() -> None:
    answer = {
        "ran": True,
        "version": "0.5.23",
        "gpu": "x",
        "cases": [
            {"error": "sglang's resolution refused the launch: ValueError: no", "backends": {}}
        ],
    }
    verdict = judge(_launch(), FACTS, _probe(answer), (12, 0))
    assert _status(verdict, "sglang_resolution") == ["fail"]
    assert any("ValueError: no" in f for f in verdict["failed"])


@pytest.mark.parametrize(
    ("resolved", "why"),
    [
        (None, "sglang's resolution was not asked"),
        ({"ran": False, "reason": "no torch"}, "sglang's resolution could not run: no torch"),
    ],
)
def test_fallback_to_the_tables_is_marked(resolved: dict[str, Any] | None, why: str) -> None:
    verdict = judge(_launch(), FACTS, _probe(resolved), (12, 0))
    assert verdict["resolved_by"] == f"the tool's rules ({why})"
    assert verdict["attention"]["how"] == "sglang default"


def test_hub_id_is_not_resolved(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    got = resolve("/x/python", {"cases": [[]]}, {"local": False, "path": "org/m"}, {})
    assert got == {
        "ran": False,
        "reason": f"the model is a hub id with no config.json in this host's Hugging Face "
        f"cache ({tmp_path}) and no --model-config: preflight does not download",
    }


def test_hub_config_is_found_in_the_cache_as_huggingface_hub_lays_it_out(
    tmp_path, monkeypatch
) -> None:
    """huggingface_hub's cache layout (models--org--name/snapshots/<rev>/config.json, refs/main
    naming the revision), built in tmp_path; a hub id with its config cached is resolved."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    root = tmp_path / "models--Qwen--Qwen2.5-7B"
    for rev in ("aaa", "bbb"):
        (root / "snapshots" / rev).mkdir(parents=True)
        (root / "snapshots" / rev / "config.json").write_text("{}")
    assert hub_config("Qwen/Qwen2.5-7B") == str(root / "snapshots" / "aaa" / "config.json")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("bbb\n")
    assert hub_config("Qwen/Qwen2.5-7B") == str(root / "snapshots" / "bbb" / "config.json")
    assert hub_config("Qwen/Other") is None and hub_config("not-a-hub-id") is None
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache() == str(tmp_path / "home" / "hub")


def test_in_env_script_says_why_it_could_not_run(tmp_path) -> None:
    """The real 0.5.23 stack venv has sglang without its dependencies: sglang's own import
    error is the reason, and the fake GPU is named."""
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    python = str(stack_venv() / "bin" / "python")
    request = {"cases": [["--model-path", str(tmp_path)]], "fields": ["attention_backend"]}
    doc, err = run_target(python, SERVER_ARGS_SRC, dict(request, cc=[12, 0]), 120)
    assert err is None and doc is not None
    assert doc["ran"] is False
    assert "No module named" in doc["reason"]
    assert doc["gpu"] == "no GPU: torch.cuda faked as one GPU of capability 12.0, 1024 MiB"
    res = resolution({"resolved": doc})
    assert res["by"].startswith("the tool's rules (sglang's resolution could not run: cannot")


def test_an_answer_without_any_backend_is_unknown_not_a_pass() -> None:
    """An sglang whose ServerArgs has none of the fields asked answers {} (or all None)."""
    for backends in ({}, {"attention_backend": None}):
        doc = {"ran": True, "version": "0.6.0", "gpu": "g", "cases": [{"backends": backends}]}
        verdict = judge(_launch(), FACTS, _probe(doc), (12, 0))
        got = next(c for c in verdict["checks"] if c["check"] == "sglang_resolution")
        assert got["status"] == "unknown", got


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("config from the host's HF cache (bbb)", "; config from the host's HF cache (bbb)"),
        ("config from --model-config", "; config from --model-config"),
        (None, None),
    ],
)
def test_the_resolution_says_where_a_hub_ids_config_came_from(source, said) -> None:
    """A hub id resolved from a config (the host's HF cache at a revision, or --model-config):
    the sglang_resolution verdict names it, so a pass says what it rests on."""
    from sm120kit.preflight.verdicts import resolution, resolution_check

    doc = {"ran": True, "version": "0.5.23", "gpu": "g", "model_source": source}
    doc["cases"] = [{"backends": {"attention_backend": "flashinfer"}, "error": None}]
    got = resolution_check(resolution({"resolved": doc}))
    assert got["status"] == "pass"
    assert (said in got["reason"]) if said else ("config from" not in got["reason"])

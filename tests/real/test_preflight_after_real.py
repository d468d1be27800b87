"""tests/unit/test_preflight_after.py's launches in a real sglang 0.5.23 serving env: sglang's
own checks past resolution quoted, a hub id resolved from --model-config and from the HF cache,
an unknown backend failing under --strict, and the warm server answering as a fresh
interpreter. Set SM120KIT_SERVING_ENV to the real env's python to run them (CI has none: they
skip).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sm120kit.packages.stack import catalogues
from sm120kit.preflight.launch import parse_launch
from sm120kit.preflight.rules import RESOLVED_FIELDS
from sm120kit.preflight.verdicts import judge, probe_request
from sm120kit.remote import preflight_probe
from sm120kit.remote.preflight_probe import model_state, resolve
from tests.unit.test_preflight_after import FA3, FACTS, GLM, GLM_TRTLLM, MODELS, RAN

REAL_ENV = os.environ.get("SM120KIT_SERVING_ENV")
real_env = pytest.mark.skipif(
    not REAL_ENV,
    reason="needs a real sglang 0.5.23 serving env: set SM120KIT_SERVING_ENV to its python",
)


def _real(words: list[str], **extra: Any) -> dict[str, Any]:
    """The probe's resolution of one launch in the real env, fresh (no warm server)."""
    assert REAL_ENV
    model = extra.pop("model", None) or model_state(words[1])
    request = {"cases": [words], "fields": list(RESOLVED_FIELDS), "cc": [12, 0]}
    request.update(memory_mib=32768, **extra)
    lib = Path(REAL_ENV).parent.parent / "lib"
    site = str(sorted(lib.glob("python3*/site-packages"))[0])
    return resolve(REAL_ENV, request, model, {"timeout": 900}, site)


@real_env
def test_real_env_runs_sglangs_checks_and_quotes_its_refusals() -> None:
    """Class 2 in the real env: FA3's assert and the DSA validators, sglang's own words."""
    fa3 = _real(["--model-path", str(MODELS / "llama-mha"), "--attention-backend", "fa3"])
    steps = {s["step"]: s for s in fa3["cases"][0]["after"]}
    assert [s for s in RAN if steps[s]["status"] == "ran"] == RAN
    assert steps["attention_backend_init:fa3"]["detail"] == FA3
    glm = _real(["--model-path", str(GLM), "--dsa-decode-backend", "trtllm"])
    steps = {s["step"]: s for s in glm["cases"][0]["after"]}
    assert steps["dsa_flashinfer_sparse_mla"]["detail"] == GLM_TRTLLM
    default = _real(["--model-path", str(GLM)])
    case = default["cases"][0]
    assert case["backends"]["dsa_decode_backend"] == "flashinfer_sparse_mla"
    assert all(s["status"] in ("ran", "stopped") for s in case["after"])


@real_env
def test_real_env_resolves_a_hub_id_from_model_config_and_from_the_cache(
    tmp_path, monkeypatch
) -> None:
    """Class 3 in the real env: --model-config's config, and the host's HF cache layout."""
    config = json.loads((MODELS / "deepseek-v2-mla" / "config.json").read_text())
    hub = {"path": "org/mla", "local": False}
    given = _real(["--model-path", "org/mla"], model_config=config, model=hub)
    assert given["ran"] and given["cases"][0]["backends"]["attention_backend"] == "triton"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snap = tmp_path / "models--org--mha" / "snapshots" / "r1"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text((MODELS / "llama-mha" / "config.json").read_text())
    cached = _real(["--model-path", "org/mha"], model={"path": "org/mha", "local": False})
    # Found in the cache and run on the snapshot directory: with only config.json cached (no
    # refs/main, no tokenizer files) sglang resolves it offline, nothing asks the hub.
    assert cached["ran"], cached
    assert cached["cases"][0]["error"] is None, cached["cases"][0]
    assert cached["cases"][0]["backends"]["attention_backend"] == "flashinfer"
    assert cached["model_source"] == "config from the host's HF cache (r1)"
    assert given["model_source"] == "config from --model-config"
    missing = _real(["--model-path", "org/none"], model={"path": "org/none", "local": False})
    assert not missing["ran"] and "--model-config" in missing["reason"]


@real_env
def test_real_env_unknown_backend_fails_under_strict() -> None:
    """Class 4 in the real env: DSA tilelang (undecided on 12.x) resolved by sglang, judged
    unknown; --strict fails. (trtllm_mha was the example; on 12.x it is decided now from its
    FMHAv2/XQA gates, as in tests/unit/test_preflight_after.py.)"""
    argv = ["--model-path", str(MODELS / "deepseek-v32-dsa")]
    argv += ["--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang"]
    launch = parse_launch(argv)
    request = probe_request(launch, REAL_ENV, (12, 0), resolve=True, memory_mib=32768)
    request["resolve"]["warm"] = 0
    probe = preflight_probe.probe(request)
    loose = judge(launch, FACTS, probe, (12, 0), "serving env", catalogues())
    assert loose["ok"] and loose["verdict"] == "unknown", loose["failed"]
    assert any(line.startswith("dsa_prefill_backend:") for line in loose["unknown"])
    strict = judge(launch, FACTS, probe, (12, 0), "serving env", catalogues(), strict=True)
    assert not strict["ok"]
    assert any(line.startswith("dsa_prefill_backend: unknown") for line in strict["failed"])


@real_env
def test_real_env_warm_server_answers_as_a_fresh_interpreter(tmp_path, monkeypatch) -> None:
    """Speed in the real env: a child of the warm server answers what a fresh run does."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", tempfile.mkdtemp(prefix="pf-", dir="/tmp"))
    words = ["--model-path", str(MODELS / "deepseek-v32-dsa")]
    fresh = _real(words)
    request = {"cases": [words], "fields": list(RESOLVED_FIELDS), "cc": [12, 0]}
    request.update(memory_mib=32768)
    lib = Path(str(REAL_ENV)).parent.parent / "lib"
    site = str(sorted(lib.glob("python3*/site-packages"))[0])
    first = preflight_probe.warm_resolve(str(REAL_ENV), request, site, ["t"], 60, 900)
    second = preflight_probe.warm_resolve(str(REAL_ENV), request, site, ["t"], 60, 900)
    assert first and second and "started now" in first["server"]
    assert "imported before" in second["server"]
    for doc in (first, second):
        assert doc["cases"][0]["backends"] == fresh["cases"][0]["backends"]
        assert doc["cases"][0]["after"] == fresh["cases"][0]["after"]

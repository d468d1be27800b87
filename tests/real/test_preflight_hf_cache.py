"""A hub model id whose config.json is in the host's Hugging Face cache: `invoke preflight`
over a real sshd on loopback, the host's cache written by the test in huggingface_hub's layout
(``models--ORG--NAME/snapshots/REV/config.json``, ``refs/main`` naming REV) under the host's
own HF_HUB_CACHE (sshd SetEnv). The serving env is the real sglang 0.5.23 env
(SM120KIT_SERVING_ENV, run by hand; CI has none): sglang resolves the launch on the cached
snapshot, offline, and the verdict says "config from the host's HF cache (REV)". Only the GPU
is simulated (the fleet's stub nvidia-smi, the faked torch.cuda of the in-env script).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet

MODELS = Path(__file__).parent.parent / "fixtures" / "models"
REAL_ENV = os.environ.get("SM120KIT_SERVING_ENV")


@pytest.mark.skipif(
    not REAL_ENV,
    reason="needs a real sglang 0.5.23 serving env: set SM120KIT_SERVING_ENV to its python "
    "(run by hand; CI has none)",
)
def test_a_hub_id_in_the_hosts_hf_cache_is_resolved_offline(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    root = hub / "models--acme--tiny-llama"
    rev = "0123456789abcdef0123456789abcdef01234567"
    (root / "snapshots" / rev).mkdir(parents=True)
    (root / "snapshots" / rev / "config.json").write_text(
        (MODELS / "llama-mha" / "config.json").read_text()
    )
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(rev)
    fleet = Fleet(
        tmp_path / "fleet",
        [("pfhf", "127.0.0.2", "rtx5090")],
        host_env={"pfhf": {"HF_HUB_CACHE": str(hub)}},
    ).start()
    try:
        argv = ["preflight", "-H", "pfhf", "--python", str(REAL_ENV), "--json", "--"]
        argv += ["python", "-m", "sglang.launch_server", "--model-path", "acme/tiny-llama"]
        proc = run_invoke(argv, invoke_env(fleet, tmp_path), timeout=500)
        doc = json_of(proc)
        checks = {c["check"]: c for c in doc["hosts"]["pfhf"]["preflight"]["checks"]}
        res = checks["sglang_resolution"]
        assert res["status"] == "pass", res
        assert f"config from the host's HF cache ({rev})" in res["reason"]
        assert checks["attention_backend"]["status"] == "pass", checks["attention_backend"]
        assert checks["sglang_checks"]["status"] == "pass", checks["sglang_checks"]
    finally:
        fleet.stop()

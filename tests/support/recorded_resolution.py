"""Recording tests/fixtures/preflight/sglang-0.5.23-resolved.json: sglang's real resolution and
its own checks past resolution (remote/lib/in_target/server_args.py ``_after``) of every
recorded launch, in the real sglang 0.5.23 serving env, with that env's distributions and
module fatbins as the preflight probe reads them.

By hand, in the env `provision --stack` makes::

    python3 -m tests.support.recorded_resolution /path/to/envs/stack-sglang-0.5.23-.../bin/python

re-resolves the launches already in the file plus ADDED (one probe run: torch.cuda faked as one
12.0 GPU of 32 GiB and the driver stub when the host has none), and rewrites the file with the
model paths as ``@<stand-in>`` (tests/fixtures/models/).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sm120kit.preflight.launch import parse_launch
from sm120kit.preflight.verdicts import probe_request
from sm120kit.remote.preflight_probe import probe
from tests.support.public_corpus import FIXTURES, MODELS, _portable

FILE = FIXTURES / "preflight" / "sglang-0.5.23-resolved.json"

#: Launches added to the recording (each model directory needs one with and one without flags).
ADDED = [
    "--model-path @glm-moe-dsa",
    "--model-path @glm-moe-dsa --kv-cache-dtype fp8_e4m3",
    "--model-path @glm-moe-dsa --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend trtllm "
    "--dsa-decode-backend trtllm",
]


def _local(argv: list[str]) -> list[str]:
    return [str(MODELS / w[1:]) if w.startswith("@") else w for w in argv]


def record(env_python: str, argvs: list[list[str]], timeout: float = 900) -> dict[str, Any]:
    """The whole recording: each argv (``@`` stand-ins) resolved and checked by the env."""
    first = parse_launch(["python", "-m", "sglang.launch_server", *_local(argvs[0])])
    request = probe_request(first, env_python, (12, 0), resolve=True, memory_mib=32768)
    request["resolve"]["cases"] = [_local(a) for a in argvs]
    request["port"] = None
    request["timeout"] = timeout
    doc = probe(request)
    resolved = doc.get("resolved") or {}
    if not resolved.get("ran"):
        raise SystemExit(f"the env did not resolve: {resolved.get('reason') or doc.get('error')}")
    cases = [
        {"argv": a, "backends": c["backends"], "error": c["error"], "after": c.get("after") or []}
        for a, c in zip(argvs, resolved["cases"], strict=True)
    ]
    # The env's own directory as "<envs>" (the file does not depend on where envs live).
    envs = str(Path(env_python).parent.parent.parent)
    doc = json.loads(json.dumps(doc).replace(envs + "/", "<envs>/"))
    return _portable(
        {
            "recorded": "tests/support/recorded_resolution.py record() in the real sglang "
            f"{resolved.get('version')} serving env ({doc.get('python')}): "
            "remote/lib/in_target/server_args.py's resolution and its checks past it; "
            "'@name' is tests/fixtures/models/name; env: the probe's dists and modules",
            "version": resolved.get("version"),
            "gpu": resolved.get("gpu"),
            "env": {
                "dists": doc.get("dists"),
                "installed": doc.get("installed"),
                "modules": doc.get("modules"),
            },
            "cases": cases,
        }
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m tests.support.recorded_resolution ENV_PYTHON", file=sys.stderr)
        return 1
    old = json.loads(FILE.read_text())
    argvs = [c["argv"] for c in old["cases"]]
    argvs += [a.split() for a in ADDED if a.split() not in argvs]
    doc = record(argv[1], argvs)
    FILE.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{FILE}: {len(doc['cases'])} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

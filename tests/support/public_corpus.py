"""The public-report corpus of SM120 launches (tests/fixtures/preflight/public-corpus.toml):
loading it, recording sglang's real resolution of every launch in a real serving env, and
judging each launch from that recording with preflight's own `judge`.

Recording (by hand, in the real sglang 0.5.23 serving env that `provision --stack` makes)::

    python3 -m tests.support.public_corpus /path/to/envs/stack-sglang-0.5.23-.../bin/python
    python3 -m tests.support.public_corpus --fixture /path/to/.../bin/python

(the second re-records tests/fixtures/preflight/sglang-0.5.23-resolved.json, the same
launches, see `record_fixture`)

runs the preflight probe itself (sm120kit/remote/preflight_probe.py `probe`: the env's
distributions, their extension modules' fatbins, and sglang's own resolution of every launch
in one interpreter, torch.cuda faked as one 12.0 GPU and the driver stub when the host has
none) and writes tests/fixtures/preflight/public-corpus-resolved.json, the model paths written
as ``@<stand-in>`` so that the file does not depend on where the checkout lives.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120kit.packages.stack import catalogues
from sm120kit.preflight.launch import Launch, parse_launch, server_args
from sm120kit.preflight.verdicts import judge, probe_request
from sm120kit.remote.preflight_probe import model_state, probe

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODELS = FIXTURES / "models"
CORPUS = FIXTURES / "preflight" / "public-corpus.toml"
RECORDED = FIXTURES / "preflight" / "public-corpus-resolved.json"
FIXTURE = FIXTURES / "preflight" / "sglang-0.5.23-resolved.json"
#: Launches of the GLM DSA stand-in (GlmMoeDsaForCausalLM: sglang 0.5.23's SM120 sparse-MLA
#: validator, kernels/ops/attention/flash_mla_sm120.py:678, keys on that architecture).
FIXTURE_EXTRA = [
    ["--model-path", "@glm-moe-dsa"],
    ["--model-path", "@glm-moe-dsa", "--kv-cache-dtype", "fp8_e4m3"],
    [
        "--model-path",
        "@glm-moe-dsa",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--dsa-prefill-backend",
        "trtllm",
        "--dsa-decode-backend",
        "trtllm",
    ],
]
#: The driver the corpus hosts are given (RTX PRO 6000 / 5090 reports run 575-610).
DRIVER = "580.95.05"


@dataclass(frozen=True)
class Report:
    """One launch of the corpus, as the TOML states it."""

    id: str
    url: str
    gpu: str
    gpus: int
    memory_mib: int
    launch: str
    args: str
    truth: str
    expected: str
    reason: str | None
    owner: str | None

    def argv(self) -> list[str]:
        """The judged arguments with ``@name`` as the stand-in config's directory."""
        return [str(MODELS / w[1:]) if w.startswith("@") else w for w in shlex.split(self.args)]

    def parsed(self) -> Launch:
        """The launch as preflight reads it."""
        return parse_launch(["python", "-m", "sglang.launch_server", *self.argv()])

    def facts(self) -> dict[str, Any]:
        """The host facts of the report: its GPU count and board memory, nothing held."""
        gpus = [
            {"index": i, "memory_mib": self.memory_mib, "memory_used_mib": 0, "processes": []}
            for i in range(self.gpus)
        ]
        return {"gpu": {"present": True, "driver_version": DRIVER, "gpus": gpus}}


def load(path: Path = CORPUS) -> list[Report]:
    """Every launch of the corpus."""
    doc = tomllib.loads(path.read_text())
    return [
        Report(
            id=e["id"],
            url=e["url"],
            gpu=e["gpu"],
            gpus=int(e["gpus"]),
            memory_mib=int(e["memory_mib"]),
            launch=e["launch"],
            args=e["args"],
            truth=e["truth"],
            expected=e["expected"],
            reason=e.get("reason"),
            owner=e.get("owner"),
        )
        for e in doc["launch"]
    ]


def _portable(value: Any) -> Any:
    """`value` with this checkout's model directory written as ``@``."""
    text = json.dumps(value)
    return json.loads(text.replace(str(MODELS) + "/", "@"))


def _local(value: Any) -> Any:
    text = json.dumps(value)
    return json.loads(text.replace('"@', json.dumps(str(MODELS) + "/")[:-1]))


def _probe_all(env_python: str, launches: list[Launch], timeout: float) -> dict[str, Any]:
    """The preflight probe's whole answer in the env of `env_python`: one run, every launch's
    argv resolved by the env's own sglang and its own checks after it (12.0, 32768 MiB)."""
    request = probe_request(launches[0], env_python, (12, 0), resolve=True, memory_mib=32768)
    request["resolve"]["cases"] = [server_args(launch.words) for launch in launches]
    request["port"] = None
    request["timeout"] = timeout
    return probe(request)


def record(env_python: str, reports: list[Report], timeout: float = 900) -> dict[str, Any]:
    """The preflight probe's whole answer for the corpus in the env of `env_python`: one run,
    every launch's argv resolved by the env's own sglang (12.0, the first report's memory)."""
    doc = _probe_all(env_python, [r.parsed() for r in reports], timeout)
    resolved = doc.get("resolved") or {}
    answered = resolved.get("cases") or []  # none when the resolution could not run
    cases = [dict(c, id=r.id) for r, c in zip(reports[: len(answered)], answered, strict=True)]
    return _portable(
        {
            "recorded": "tests/support/public_corpus.py record() in the real sglang "
            f"{resolved.get('version')} serving env ({doc.get('python')})",
            "version": resolved.get("version"),
            "ran": resolved.get("ran"),
            "reason": resolved.get("reason"),
            "gpu": resolved.get("gpu"),
            "driver": resolved.get("driver"),
            "env": _env_of(doc),
            "cases": cases,
        }
    )


def _env_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The probed env's distributions, installed files and module fatbins, as recorded."""
    return {k: doc.get(k) for k in ("dists", "installed", "modules")}


def record_fixture(env_python: str, path: Path = FIXTURE, timeout: float = 900) -> dict[str, Any]:
    """tests/fixtures/preflight/sglang-0.5.23-resolved.json re-recorded in the env of
    `env_python`: the same launches (their ``argv``, ``@name`` a stand-in of
    tests/fixtures/models/), each with sglang's resolution and its checks after it
    (``after``), and the env's distributions and module fatbins as the probe reads them."""
    old = json.loads(path.read_text())
    argvs = [c["argv"] for c in old["cases"]] + [
        a for a in FIXTURE_EXTRA if a not in [c["argv"] for c in old["cases"]]
    ]
    launches = [
        parse_launch(["python", "-m", "sglang.launch_server", *_local(argv)]) for argv in argvs
    ]
    doc = _probe_all(env_python, launches, timeout)
    resolved = doc.get("resolved") or {}
    if not resolved.get("ran"):
        raise SystemExit(f"the resolution did not run: {resolved.get('reason')}")
    cases = [dict(c, argv=argv) for argv, c in zip(argvs, resolved["cases"], strict=True)]
    return _portable(
        {
            "recorded": "tests/support/public_corpus.py record_fixture() in the real sglang "
            f"{resolved.get('version')} serving env ({doc.get('python')}): "
            "remote/preflight_probe.py probe, resolution and sglang's checks after it "
            "(remote/lib/in_target/server_args.py); '@name' is tests/fixtures/models/name",
            "version": resolved.get("version"),
            "gpu": resolved.get("gpu"),
            "driver": resolved.get("driver"),
            "env": _env_of(doc),
            "cases": cases,
        }
    )


def verdict(report: Report, recorded: dict[str, Any]) -> dict[str, Any]:
    """preflight's `judge` of one report from the recording (its env, its resolution)."""
    case = next(c for c in recorded["cases"] if c["id"] == report.id)
    env = _local(recorded["env"])
    probe_doc: dict[str, Any] = {"error": None, "python": "/env/bin/python", **env}
    probe_doc["model"] = model_state(report.argv()[report.argv().index("--model-path") + 1])
    probe_doc["resolved"] = {
        "ran": True,
        "version": recorded["version"],
        "gpu": recorded["gpu"],
        "driver": recorded.get("driver"),
        "cases": [_local(case)],
    }
    return judge(report.parsed(), report.facts(), probe_doc, (12, 0), "serving env", catalogues())


def overall(result: dict[str, Any]) -> str:
    """One word per launch: fail (a check failed), unknown (a check says it cannot tell),
    else pass (warnings included)."""
    statuses = {c["status"] for c in result["checks"]}
    if "fail" in statuses:
        return "fail"
    if "unknown" in statuses:
        return "unknown"
    return "pass"


@dataclass(frozen=True)
class Scored:
    """One report's verdict against what it should be."""

    report: Report
    got: str
    failed: tuple[str, ...]
    right: bool


def score(reports: list[Report], recorded: dict[str, Any]) -> list[Scored]:
    """Each report judged: right when the verdict is the expected one and, for a fail with a
    `reason`, that check is among the failed ones."""
    out = []
    for r in reports:
        result = verdict(r, recorded)
        got = overall(result)
        failed = tuple(c["check"] for c in result["checks"] if c["status"] == "fail")
        right = got == r.expected and (r.expected != "fail" or not r.reason or r.reason in failed)
        out.append(Scored(r, got, failed, right))
    return out


def markdown(scored: list[Scored]) -> str:
    """The docs/preflight.md table of the corpus: launch, report, truth, verdict, right."""
    rows = ["| launch | report | truth (0.5.23) | expected | preflight | right? |"]
    rows.append("|---|---|---|---|---|---|")
    for s in scored:
        r = s.report
        where = r.url.replace("https://github.com/", "").replace("/issues/", "#")
        where = where.replace("/pull/", "#")
        got = s.got + (f" ({', '.join(s.failed)})" if s.failed else "")
        want = r.expected + (f" ({r.reason})" if r.reason else "")
        owner = f"class {r.owner}" if r.owner and r.owner[0].isdigit() else r.owner
        mark = "yes" if s.right else f"no ({owner})" if owner else "no"
        rows.append(f"| `{r.id}` | [{where}]({r.url}) | {r.truth} | {want} | {got} | {mark} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--table"]:
        print(markdown(score(load(), json.loads(RECORDED.read_text()))))
        return 0
    if len(argv) == 3 and argv[1] == "--fixture":
        doc = record_fixture(argv[2])
        FIXTURE.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{FIXTURE}: {len(doc['cases'])} launches")
        return 0
    if len(argv) != 2:
        print(
            "usage: python3 -m tests.support.public_corpus ENV_PYTHON | --fixture ENV_PYTHON "
            "| --table",
            file=sys.stderr,
        )
        return 1
    doc = record(argv[1], load())
    RECORDED.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{RECORDED}: {len(doc['cases'])} launches, ran={doc['ran']} {doc.get('reason') or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Controller side of the smoke probe: arguments, result model, verdicts and table rows.

The probe itself (``sm120kit/remote/extension_probe.py``) runs on the host under ``python -`` and
prints one JSON document; this module builds its arguments, parses that document into
:class:`SmokeReport` and turns it into rich-free rows ``(package, check, status, reason)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sm120kit.errors import HostFailed, Sm120Error
from sm120kit.remote import parse_last_json, script_bundle
from sm120kit.remote.lib import cudaarch as _arch
from sm120kit.remote.lib import fatbin as _fatbin

#: Name for ``sm120kit.remote.run_script(conn, SCRIPT, probe_args(...))``.
SCRIPT = "extension_probe"

STATUSES = ("pass", "warn", "fail", "skip")
#: Per-file status inside a check's details: not for this arch by design, so not judged.
INFO = "info"
CHECKS = ("import_order", "undefined_symbols", "arch_coverage", "loader", "gpu_op")
# Worst first wins; a skip never hides a pass.
_SEVERITY = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}

# The arch rules live in the hosts' library (the probe runs them there); re-exported here.
parse_cc = _arch.parse_cc
sass_runs_on = _arch.sass_runs_on
ptx_jits_on = _arch.ptx_jits_on
arch_verdict = _arch.arch_verdict
fatbin_entries = _fatbin.fatbin_entries
device_targets = _fatbin.device_targets


@dataclass(frozen=True)
class MissingSymbol:
    """An undefined dynamic symbol nothing in the load scope defines."""

    name: str
    demangled: str
    expected_from: str | None = None
    version: str | None = None
    cause: str | None = None
    #: The installed torch's closest definition, for a torch symbol that drifted.
    variant: str | None = None


@dataclass(frozen=True)
class Extension:
    """One shared object a distribution ships, as the probe saw it."""

    path: str
    rel: str | None = None
    module: str | None = None
    needed: tuple[str, ...] = ()
    missing_libs: tuple[str, ...] = ()
    needs_torch_loaded: tuple[str, ...] = ()
    missing_symbols: tuple[MissingSymbol, ...] = ()
    missing_symbols_total: int = 0
    missing_versions: tuple[dict[str, Any], ...] = ()
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    dlopen_error: str | None = None
    import_error: str | None = None
    import_alone_error: str | None = None
    diagnosis: tuple[str, ...] = ()
    #: The missing parts sorted into causes: ``{"cause", "reason", "libraries", "symbols"}``.
    causes: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Check:
    """One check's verdict for one distribution."""

    check: str
    status: str
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PackageResult:
    """Every check of one distribution."""

    name: str
    installed: bool
    version: str | None = None
    requires_torch: str | None = None
    checks: tuple[Check, ...] = ()
    extensions: tuple[Extension, ...] = ()
    #: The wheel's build record (``sm120kit-build.json`` in its dist-info), if it has one.
    provenance: Mapping[str, Any] | None = None
    #: ``{"torch": "==2.9.1", "cuda", "source"}``: which torch it was built for and who says so.
    built_for: Mapping[str, Any] | None = None
    #: ``{"built_for", "built_for_source", "installed", "installed_cuda", "cpu_build",
    #: "summary"}``: the torch it was built for beside the env's.
    torch: Mapping[str, Any] | None = None

    @property
    def status(self) -> str:
        """The worst check status; ``fail`` when the distribution is not installed."""
        if not self.installed:
            return "fail"
        return worst_status(c.status for c in self.checks)

    def check(self, name: str) -> Check | None:
        """The check called ``name``, if the probe ran it."""
        return next((c for c in self.checks if c.check == name), None)


@dataclass(frozen=True)
class TorchInfo:
    """The target env's torch as imported there (``error`` when the import failed)."""

    version: str | None = None
    cxx11_abi: bool | None = None
    cuda: str | None = None
    cuda_available: bool | None = None
    capability: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class SmokeReport:
    """The whole probe result for one host."""

    python: str
    packages: dict[str, PackageResult]
    torch: TorchInfo = field(default_factory=TorchInfo)
    python_version: str | None = None
    arch: str | None = None
    arch_source: str | None = None
    gpu: bool = False
    error: str | None = None
    #: No interpreter at ``python`` (``error`` says why): the env does not exist.
    missing_python: bool = False

    @property
    def status(self) -> str:
        """Worst status over all packages; ``fail`` when the probe itself failed."""
        if self.error:
            return "fail"
        return worst_status(p.status for p in self.packages.values())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SmokeReport:
        """Build from the probe's JSON document (already decoded)."""
        packages = {name: _package(name, raw) for name, raw in (data.get("packages") or {}).items()}
        torch_raw = data.get("torch") or {}
        torch = TorchInfo(**{k: torch_raw.get(k) for k in TorchInfo.__dataclass_fields__})
        return cls(
            python=str(data.get("python") or ""),
            packages=packages,
            torch=torch,
            python_version=data.get("python_version"),
            arch=data.get("arch"),
            arch_source=data.get("arch_source"),
            gpu=bool(data.get("gpu")),
            error=data.get("error"),
            missing_python=bool(data.get("missing_python")),
        )


def _symbol(raw: Mapping[str, Any]) -> MissingSymbol:
    return MissingSymbol(
        name=raw["name"],
        demangled=raw.get("demangled") or raw["name"],
        expected_from=raw.get("expected_from"),
        version=raw.get("version"),
        cause=raw.get("cause"),
        variant=raw.get("variant"),
    )


def _extension(raw: Mapping[str, Any]) -> Extension:
    return Extension(
        path=raw["path"],
        rel=raw.get("rel"),
        module=raw.get("module"),
        needed=tuple(raw.get("needed") or ()),
        missing_libs=tuple(raw.get("missing_libs") or ()),
        needs_torch_loaded=tuple(raw.get("needs_torch_loaded") or ()),
        missing_symbols=tuple(_symbol(s) for s in raw.get("missing_symbols") or ()),
        missing_symbols_total=int(raw.get("missing_symbols_total") or 0),
        missing_versions=tuple(raw.get("missing_versions") or ()),
        sass=tuple(raw.get("sass") or ()),
        ptx=tuple(raw.get("ptx") or ()),
        dlopen_error=raw.get("dlopen_error"),
        import_error=raw.get("import_error"),
        import_alone_error=raw.get("import_alone_error"),
        diagnosis=tuple(raw.get("diagnosis") or ()),
        causes=tuple(raw.get("causes") or ()),
    )


def _package(name: str, raw: Mapping[str, Any]) -> PackageResult:
    checks = tuple(
        Check(c["check"], c["status"], c.get("reason", ""), c.get("details") or {})
        for c in raw.get("checks") or ()
    )
    for c in checks:
        if c.status not in STATUSES:
            raise ValueError(f"package {name}: check {c.check} has status {c.status!r}")
    return PackageResult(
        name=name,
        installed=bool(raw.get("installed")),
        version=raw.get("version"),
        requires_torch=raw.get("requires_torch"),
        checks=checks,
        extensions=tuple(_extension(e) for e in raw.get("extensions") or ()),
        provenance=raw.get("provenance"),
        built_for=raw.get("built_for"),
        torch=raw.get("torch"),
    )


def probe_source() -> str:
    """The probe script's text, to send to a host on stdin (``python - '<args>'``)."""
    return script_bundle(SCRIPT)


def probe_args(
    packages: Iterable[str],
    *,
    python: str | None = None,
    arch: str | None = None,
    gpu: bool = False,
    gpu_ops: Mapping[str, str] | None = None,
    jobs: int | None = None,
    timeout: float | None = None,
    declared: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The probe's JSON argument (a dict). Raises :class:`Sm120Error` on a malformed ``arch``."""
    try:
        parse_cc(arch)
    except ValueError as exc:
        raise Sm120Error(f"--arch {arch!r}: not a compute capability like 12.0") from exc
    args: dict[str, Any] = {"python": python, "packages": list(packages), "arch": arch, "gpu": gpu}
    if gpu_ops:
        args["gpu_ops"] = dict(gpu_ops)
    if jobs:
        args["jobs"] = jobs
    if timeout:
        args["timeout"] = timeout
    if declared:
        args["declared"] = {name: dict(value) for name, value in declared.items()}
    return args


def parse_probe_output(stdout: str, host: str) -> SmokeReport:
    """Parse what the probe printed on ``host``; :class:`HostFailed` (one line) if malformed."""
    text = stdout.strip()
    data = parse_last_json(text)
    if data is None:
        first = text.splitlines()[0][:120] if text else "(nothing)"
        raise HostFailed(f"{host}: smoke probe printed no JSON: {first}")
    return report_from_json(data, host)


def report_from_json(data: Mapping[str, Any], host: str) -> SmokeReport:
    """:meth:`SmokeReport.from_json` with malformed documents as one-line :class:`HostFailed`."""
    try:
        return SmokeReport.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HostFailed(f"{host}: smoke probe JSON is malformed: {exc}") from exc


def worst_status(statuses: Iterable[str]) -> str:
    """fail > warn > pass > skip; ``skip`` for none."""
    worst = "skip"
    for status in statuses:
        if _SEVERITY.get(status, 3) > _SEVERITY[worst]:
            worst = status if status in _SEVERITY else "fail"
    return worst


def table_rows(report: SmokeReport) -> list[tuple[str, str, str, str]]:
    """Rows ``(package, check, status, reason)`` in probe order, one per check."""
    rows: list[tuple[str, str, str, str]] = []
    if report.error:
        rows.append(("*", "probe", "fail", report.error))
    if report.torch.error:
        rows.append(("torch", "import", "fail", report.torch.error))
    for name, pkg in report.packages.items():
        if not pkg.installed:
            rows.append((name, "installed", "fail", f"not installed in {report.python}"))
            continue
        for c in pkg.checks:
            rows.append((name, c.check, c.status, c.reason))
    return rows


def torch_line(pkg: PackageResult) -> str:
    """'built for torch 2.9.1 (recipe pin for pkg 0.3.21), this env has torch 2.13.0+cpu'."""
    return str((pkg.torch or {}).get("summary") or "")


def info_lines(pkg: PackageResult) -> list[str]:
    """The .so files a check reported as ``info`` (not for this arch by design)."""
    lines: list[str] = []
    for c in pkg.checks:
        files = list((c.details or {}).get("files") or []) + list(
            (c.details or {}).get("not_judged") or []
        )
        for f in files:
            if f.get("status") == "info":
                label = f.get("rel") or f.get("path")
                lines.append(f"{label}: info ({c.check}): {f.get('reason')}")
    return lines


def problem_lines(pkg: PackageResult) -> list[str]:
    """Per-.so lines for a detailed view: the causes, then missing libraries, versions and
    symbols (each with its cause)."""
    check = pkg.check("undefined_symbols")
    details = check.details if check is not None else {}
    order = [f.get("path") for f in details.get("failing") or []]
    info = {f.get("path") for f in details.get("not_judged") or []}
    # The .so the verdict names first (the loader's pick), then the other failing ones; the
    # causes of each before the long lists of what is missing.
    exts = sorted(
        (e for e in pkg.extensions if e.path not in info),
        key=lambda e: order.index(e.path) if e.path in order else len(order),
    )
    lines: list[str] = []
    for ext in exts:
        label = ext.rel or ext.path
        for cause in ext.causes:
            lines.append(f"{label}: cause {cause.get('cause')}: {cause.get('reason')}")
    for ext in exts:
        label = ext.rel or ext.path
        for lib in ext.missing_libs:
            lines.append(f"{label}: NEEDED {lib} not found")
        for ver in ext.missing_versions:
            lines.append(f"{label}: {ver.get('library')} lacks version {ver.get('version')}")
        for sym in ext.missing_symbols:
            origin = f" (from {sym.expected_from})" if sym.expected_from else ""
            at = f"@{sym.version}" if sym.version else ""
            why = f" [{sym.cause}]" if sym.cause else ""
            lines.append(f"{label}: undefined {sym.demangled}{at}{origin}{why}")
        hidden = ext.missing_symbols_total - len(ext.missing_symbols)
        if hidden > 0:
            lines.append(f"{label}: ... {hidden} more undefined symbols")
    return lines


def summary(report: SmokeReport) -> str:
    """One line: the env, torch, the arch judged, and the overall verdict."""
    torch = report.torch.version or "no torch"
    arch = report.arch or "no arch"
    return f"{report.python} torch {torch} arch {arch}: {report.status}"


def reuse(memo: dict[str, Any] | None, *, recheck: bool) -> str:
    """What a remembered verdict (`plays.smoke_memo.look_up`'s, found under the key of unchanged
    inputs) makes of this run: ``"run"`` the checks (none remembered, or --recheck / a
    changed env),
    ``"fail"`` again at once with the old reason (a check judged the env bad), else
    ``"pass"``: every verdict that did not fail (ok, warn with its reasons, skip) is reused
    as it was judged."""
    if not memo or recheck:
        return "run"
    return "fail" if memo.get("failed") else "pass"

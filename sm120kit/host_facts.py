"""A host's facts as typed records, parsed once from the facts probe's JSON
(`sm120kit/remote/facts_probe.py`, gathered by `sm120kit.facts.gather`).

`ProvisionState.facts` is a `HostFacts`: operations read its fields (``state.facts.gpu.present``,
``state.facts.glibc``, ``state.facts.work_root``) and record what they change on the host
through its methods (`use_compiler`, `add_toolkit`, `add_python`), so later steps of the run
see it. `json` is the probe's document itself (the object `HostContext.facts` holds, kept in
step with those methods): the pure rules written against the probe's JSON (their table tests
give it as the probe prints it: `toolchain.toolkit_spec.choose_compiler`,
`python_choice.pick_python`, ...) take it. Missing or malformed keys read as unknown (None,
empty), as the rules read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _rows(value: object) -> list[Mapping[str, object]]:
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class OsRelease:
    """``/etc/os-release``: the distro (``id``, ``id_like``) picks apt or dnf."""

    id: str | None = None
    id_like: str | None = None
    version_id: str | None = None
    codename: str | None = None
    pretty: str | None = None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as nvidia-smi lists it."""

    index: int | None
    name: str | None
    compute_cap: str | None  # "12.0"; None when the driver cannot say
    memory_mib: int | None
    bus_id: str | None


@dataclass(frozen=True)
class GpuFacts:
    """The NVIDIA driver and GPUs (``present`` False: none listed, ``error`` says why)."""

    present: bool = False
    driver_version: str | None = None
    module: str | None = None  # "open" | "proprietary" (the kernel module), None unknown
    error: str | None = None
    gpus: tuple[GpuDevice, ...] = ()


@dataclass(frozen=True)
class Compiler:
    """A GCC on the host (``source`` "nvcc_ccbin" for the one host var nvcc_ccbin names)."""

    path: str
    version: str | None
    source: str | None = None


@dataclass(frozen=True)
class FoundPython:
    """A Python interpreter the probe (or this run's ``python`` step) found."""

    path: str
    version: str | None


@dataclass(frozen=True)
class FoundToolkit:
    """A CUDA toolkit tree on the host (``source``: system | work_root | CUDA_HOME | PATH)."""

    path: str
    source: str | None
    version: str | None
    nvcc: str | None
    nvcc_release: str | None
    nvcc_version: str | None
    aliases: tuple[str, ...] = ()


@dataclass
class HostFacts:
    """What the facts probe found on one host, typed; `json` is its document."""

    work_root: str
    arch: str | None = None  # platform.machine(), e.g. "x86_64"
    glibc: str | None = None  # e.g. "2.36"
    os: OsRelease = field(default_factory=OsRelease)
    gpu: GpuFacts = field(default_factory=GpuFacts)
    gcc: list[Compiler] = field(default_factory=list)
    python: list[FoundPython] = field(default_factory=list)
    cuda: list[FoundToolkit] = field(default_factory=list)
    json: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> HostFacts:
        """The typed facts of the probe's document `doc` (kept, not copied, as `json`)."""
        os_doc, gpu = _map(doc.get("os")), _map(doc.get("gpu"))
        return cls(
            work_root=_text(doc.get("work_root")) or "",
            arch=_text(doc.get("arch")),
            glibc=_text(doc.get("glibc")),
            os=OsRelease(**{k: _text(os_doc.get(k)) for k in OsRelease.__dataclass_fields__}),
            gpu=GpuFacts(
                present=bool(gpu.get("present")),
                driver_version=_text(gpu.get("driver_version")),
                module=_text(gpu.get("module")),
                error=_text(gpu.get("error")),
                gpus=tuple(
                    GpuDevice(
                        index=_int(g.get("index")),
                        name=_text(g.get("name")),
                        compute_cap=_text(g.get("compute_cap")),
                        memory_mib=_int(g.get("memory_mib")),
                        bus_id=_text(g.get("bus_id")),
                    )
                    for g in _rows(gpu.get("gpus"))
                ),
            ),
            gcc=[_compiler(g) for g in _rows(doc.get("gcc")) if _text(g.get("path"))],
            python=[
                FoundPython(str(p["path"]), _text(p.get("version")))
                for p in _rows(doc.get("python"))
                if _text(p.get("path"))
            ],
            cuda=[_toolkit(t) for t in _rows(doc.get("cuda")) if _text(t.get("path"))],
            json=doc,
        )

    def toolkit_docs(self) -> list[Mapping[str, object]]:
        """The toolkits' entries as the probe's JSON has them (`cuda`'s order), for the
        toolkit rules written against it (`toolchain.toolkit_spec.missing_components`)."""
        return _rows(self.json.get("cuda"))

    def use_compiler(self, compiler: Compiler) -> None:
        """`compiler` first among the GCCs (host var nvcc_ccbin's), another entry of its path
        dropped."""
        self.gcc = [compiler, *(g for g in self.gcc if g.path != compiler.path)]
        self.json["gcc"] = [
            {"path": compiler.path, "version": compiler.version, "source": compiler.source},
            *(g for g in _rows(self.json.get("gcc")) if g.get("path") != compiler.path),
        ]

    def add_toolkit(self, toolkit: FoundToolkit) -> None:
        """A toolkit this run installed: later steps find it like one the probe found."""
        self.cuda.append(toolkit)
        entry = {
            "path": toolkit.path,
            "source": toolkit.source,
            "version": toolkit.version,
            "nvcc": toolkit.nvcc,
            "nvcc_release": toolkit.nvcc_release,
            "nvcc_version": toolkit.nvcc_version,
            "aliases": list(toolkit.aliases),
        }
        self.json["cuda"] = [*_rows(self.json.get("cuda")), entry]

    def add_python(self, python: FoundPython) -> None:
        """An interpreter this run installed (the ``python`` step)."""
        self.python.append(python)
        entry = {"path": python.path, "version": python.version}
        self.json["python"] = [*_rows(self.json.get("python")), entry]


def _compiler(doc: Mapping[str, object]) -> Compiler:
    return Compiler(str(doc["path"]), _text(doc.get("version")), _text(doc.get("source")))


def _toolkit(doc: Mapping[str, object]) -> FoundToolkit:
    aliases = doc.get("aliases")
    return FoundToolkit(
        path=str(doc["path"]),
        source=_text(doc.get("source")),
        version=_text(doc.get("version")),
        nvcc=_text(doc.get("nvcc")),
        nvcc_release=_text(doc.get("nvcc_release")),
        nvcc_version=_text(doc.get("nvcc_version")),
        aliases=tuple(a for a in aliases if isinstance(a, str))
        if isinstance(aliases, list)
        else (),
    )

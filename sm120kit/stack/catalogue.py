"""The catalogue of release facts: what each compiled wheel of a lock carries, read from the
wheel by the tool (`catalogue_read`), one generated file beside the lock
(``locks/<top>-<version>/catalogue.toml``).

Per distribution, the versions read with the same facts (a version range the way Spack's
``when=`` holds facts for: only the versions read are known, any other is "unknown", never a
silent pass), each wheel read (file name and sha256, so a fact is trusted only for those
bytes) and per extension module of the wheel:

- its device code: the SASS and PTX targets of its ``.nv_fatbin`` (what the CUDA runtime
  loads), or "no device code"; relocatable device code (``__nv_relfatbin``, never loaded) and
  fatbin containers outside those sections (a library that loads its own, cuFFT) apart;
- the CUDA runtime it links (``NEEDED libcudart.so.N``) and the nvcc release that built it;
- per target arch the catalogue serves (``12.0``), why it cannot run there, when it cannot.

A release also records the CUDA distributions its METADATA requires, its loader's per-arch
directories (read from the package's own Python source) and the files that look up a CUDA
toolchain at run time. Pure reading, writing and lookup here; no I/O beyond the one file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import RecipeError
from ..remote.lib.names import dist_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

FILE_NAME = "catalogue.toml"
FORMAT = 1
#: What a lookup answers when the catalogue did not read the version (or distribution) asked.
UNKNOWN = "unknown"
#: A cubin set's coverage of an arch (`CubinSet.coverage`).
YES, NO = "yes", "no"


def norm(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Foo_Bar.baz`` is ``foo-bar-baz``)."""
    return dist_name(name)


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


@dataclass(frozen=True)
class ModuleFacts:
    """One extension module (shared object) of a wheel, as read from its bytes.

    `path`: its path in the wheel; `sass`/`ptx`: the targets of the device code the CUDA
    runtime loads (empty both: no device code); `relocatable`: targets held only as
    relocatable device code; `outside`: targets of fatbin containers outside the fatbin
    sections (``(count, targets)``, loaded by the library itself if at all); `cudart`: the
    libcudart major it links; `nvcc`: the nvcc release that built it; `not_on`: target arch
    -> why no code of it runs there; `error`: why it could not be read.
    """

    path: str
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    relocatable: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    outside_count: int = 0
    cudart: int | None = None
    nvcc: str | None = None
    not_on: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def device_code(self) -> bool:
        """Whether the module holds loadable device code at all."""
        return bool(self.sass or self.ptx)

    @property
    def key(self) -> str:
        """Its path without the suffix (``pkg/_C``): how verification names it."""
        head, _, name = self.path.rpartition("/")
        return f"{head}/{name.split('.', 1)[0]}" if head else name.split(".", 1)[0]

    @property
    def stem(self) -> str:
        """Its file name without suffixes (``flash_ops``)."""
        return self.path.rsplit("/", 1)[-1].split(".", 1)[0]

    def same_facts(self, other: ModuleFacts) -> bool:
        """Whether two modules carry the same facts (everything but the nvcc build string)."""
        return replace(self, nvcc=None) == replace(other, nvcc=None)


@dataclass(frozen=True)
class WheelFacts:
    """One wheel file read: its version, file name, sha256 and modules; `py_files`: how many
    ``.py`` files it holds (what a host's install byte-compiles: the stack's fetch and batches
    take the files that feed the compile workers first), None when not read."""

    version: str
    filename: str
    sha256: str
    modules: tuple[ModuleFacts, ...] = ()
    py_files: int | None = None


@dataclass(frozen=True)
class LoaderFacts:
    """A package loader that picks one per-arch directory (``sm90/``, ``sm100/``) of a module:
    capability (``"9.0"``, or ``"*"`` for any other GPU) -> directory; `without_gpu`: the one
    picked with no GPU; `source`: the file and function it was read from."""

    package: str
    module: str
    variants: dict[str, str]
    without_gpu: str = ""
    source: str = ""


@dataclass(frozen=True)
class CubinSet:
    """A set of cubins a package names in its own code and launches itself, outside any
    module's fatbin (flashinfer's trtllm-gen kernels): shipped in the wheel, or downloaded at
    run time from `url` (docs/catalogue.md "Cubin sets").

    `name`: the package's name for it (or its directory in the wheel); `path`: its path under
    the package's artifact repository (or in the wheel); `url_env`: the variable that replaces
    the repository; `checksums_sha256`: the sha256 the package pins for its checksums file;
    `files`: cubins the wheel holds; `archs`: the SM targets it has cubins for, when known,
    and `archs_from` how they were read; `not_on` / `unknown`: per target arch judged, why no
    cubin of it runs there / why that cannot be known from the wheel; `source`: what was read;
    `shipped_in`: for a set not shipped, the distribution of the same lock whose wheel holds
    its cubins (``flashinfer-cubin 0.6.12 flashinfer_cubin/cubins/<path>``), its archs read
    there.
    """

    name: str
    path: str
    shipped: bool
    url: str = ""
    url_env: str = ""
    checksums_sha256: str = ""
    files: int = 0
    archs: tuple[str, ...] = ()
    archs_from: str = ""
    not_on: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    source: str = ""
    shipped_in: str = ""

    def coverage(self, arch: str) -> tuple[str, str]:
        """``(YES | NO | UNKNOWN, why)`` for target arch `arch` (``"12.0"``): NO with the
        catalogue's reason, UNKNOWN when the cubins are not in the wheel (or the catalogue did
        not judge `arch`), YES when a cubin of the set runs there."""
        if arch in self.not_on:
            return NO, self.not_on[arch]
        if arch in self.unknown:
            return UNKNOWN, self.unknown[arch]
        if self.archs:
            return YES, f"{self.name}: cubins for {', '.join(self.archs)} ({self.archs_from})"
        return UNKNOWN, f"{self.name}: {arch} not judged by the catalogue"


@dataclass(frozen=True)
class ArchGate:
    """A check in a package's own code that admits only some GPUs on a path (a C++
    ``CHECK(mSM == kSM_100 || ..., "Unsupported architecture")``, a JIT module's
    ``supported_major_versions=[10, 11]``, an ``if not is_sm100: raise``), read from the
    wheel's source (`catalogue_gates`, docs/catalogue.md "Arch gates").

    `name`: ``<path in the wheel>:<symbol>`` (the function or class holding it, and for a
    raise the flag its message names), what preflight's tables refer to; `kind`: which reader
    found it; `archs`: the capabilities it admits (``"10.0"``, or ``"10.x"`` for a major);
    `source`: ``<path>:<line> <symbol>``; `text`: the gate as written (one line);
    `not_on`: per target arch judged, why the gate refuses it.
    """

    name: str
    kind: str
    archs: tuple[str, ...]
    source: str
    text: str = ""
    not_on: dict[str, str] = field(default_factory=dict)

    def admits(self, arch: str) -> bool:
        """Whether capability `arch` (``"12.0"``) passes the gate."""
        major = arch.split(".", 1)[0]
        return any(a == arch or a == f"{major}.x" for a in self.archs)


def specifier(text: str, where: str = "") -> SpecifierSet:
    """A PEP 440 specifier set (a fact's version range); RecipeError naming `where`."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise RecipeError(f"{where}: not a version specifier: {text!r}") from None


@dataclass(frozen=True)
class ReleaseFacts:
    """A distribution's facts for the versions read (`versions`) with the same facts, and for
    the ranges `when` names (PEP 440 specifier sets, Spack's ``when=``)."""

    distribution: str
    versions: tuple[str, ...]
    wheels: tuple[WheelFacts, ...]
    cuda_requires: tuple[str, ...] = ()
    loader: LoaderFacts | None = None
    jit_lookup: tuple[str, ...] = ()
    cubin_sets: tuple[CubinSet, ...] = ()
    when: tuple[str, ...] = ()
    #: Arch gates read from the package's source (empty for catalogues made before).
    arch_gates: tuple[ArchGate, ...] = ()

    def gate(self, name: str) -> ArchGate | None:
        """The arch gate of that name (``<path>:<symbol>``), or None when none was read."""
        return next((g for g in self.arch_gates if g.name == name), None)

    def specifiers(self) -> tuple[str, ...]:
        """The version ranges the facts hold for: ``==v`` per version read, then `when`."""
        return tuple(dict.fromkeys([*(f"=={_public(v)}" for v in self.versions), *self.when]))

    def holds_for(self, version: str) -> bool:
        """Whether one of `specifiers()` contains `version` (pre-releases included; a local
        label such as ``+cu130`` is the same release)."""
        try:
            Version(version)
        except InvalidVersion:
            return _public(version) in {_public(v) for v in self.versions}
        return any(
            specifier(s, self.distribution).contains(version, prereleases=True)
            for s in self.specifiers()
        )

    def nothing_to_check(self, arch: str) -> bool:
        """Whether nothing of this release can miss `arch`: no module holds device code and
        no cubin set's coverage of `arch` is NO or UNKNOWN (a pure-Python wheel)."""
        if any(m.device_code or m.error for m in self.modules()):
            return False
        return all(s.coverage(arch)[0] == YES for s in self.cubin_sets)

    def modules(self) -> list[ModuleFacts]:
        """Every module of every wheel read, each path once."""
        seen: dict[str, ModuleFacts] = {}
        for wheel in self.wheels:
            for mod in wheel.modules:
                seen.setdefault(mod.path, mod)
        return list(seen.values())

    def _shape(self) -> tuple[Any, ...]:
        mods = sorted((replace(m, nvcc=None) for m in self.modules()), key=lambda m: m.path)
        return (tuple(mods), self.cuda_requires, self.loader, self.jit_lookup,
                self.cubin_sets, self.when, self.arch_gates)  # fmt: skip


@dataclass(frozen=True)
class Lookup:
    """A lookup's answer: `facts` when the version was read, else why it is unknown."""

    facts: ReleaseFacts | None
    reason: str = ""

    @property
    def known(self) -> bool:
        """Whether the catalogue read this release."""
        return self.facts is not None


@dataclass(frozen=True)
class Catalogue:
    """The facts of one lock directory's compiled wheels, for the `targets` it judged."""

    releases: tuple[ReleaseFacts, ...]
    targets: tuple[str, ...] = ("12.0",)
    source: str = ""
    path: Path | None = None
    #: Other names a distribution is published under (an old name -> the current one).
    aliases: dict[str, str] = field(default_factory=dict)

    def names(self, name: str) -> set[str]:
        """`name` and every name it is published under, normalised."""
        key = norm(name)
        out = {key}
        for a, b in self.aliases.items():
            if key in (norm(a), norm(b)):
                out |= {norm(a), norm(b)}
        return out

    def lookup(self, name: str, version: str) -> Lookup:
        """The facts of distribution `name` (any spelling, any name it is published under) at
        `version`; unknown (with why) when that version or distribution was not read."""
        names = self.names(name)
        found = [r for r in self.releases if r.distribution in names]
        if not found:
            return Lookup(None, f"{name}: {UNKNOWN} (no wheel of it read{self._where()})")
        for rel in found:
            if rel.holds_for(version):
                return Lookup(rel)
        read = ", ".join(v for r in found for v in r.versions)
        ranges = "; ".join(w for r in found for w in r.when)
        read += f"; ranges: {ranges}" if ranges else ""
        return Lookup(None, f"{name} {version}: {UNKNOWN} (versions read: {read}{self._where()})")

    def cubin_sets(self, name: str, version: str) -> tuple[CubinSet, ...]:
        """The cubin sets of distribution `name` at `version` (``()`` when it names none, or
        when that release was not read: `lookup` says which)."""
        found = self.lookup(name, version)
        return found.facts.cubin_sets if found.facts else ()

    def by_sha256(self, sha256: str) -> tuple[ReleaseFacts, WheelFacts] | None:
        """The release and wheel read from the file of this sha256, or None."""
        for rel in self.releases:
            for wheel in rel.wheels:
                if wheel.sha256 == sha256:
                    return rel, wheel
        return None

    def not_for_arch(self, arch: str) -> dict[str, str]:
        """``{module key: why}`` of every module read that has no code for `arch`, except the
        module a package's loader imports (its failure is the package's, judged). Empty when
        the catalogue did not judge `arch`."""
        out: dict[str, str] = {}
        for rel in self.releases:
            loaded = rel.loader.module if rel.loader else None
            for mod in rel.modules():
                why = mod.not_on.get(arch)
                if why and mod.stem != loaded:
                    out.setdefault(mod.key, why)
        return out

    def loaders(self) -> dict[str, dict[str, str]]:
        """``{distribution: {capability: directory}}`` of the releases whose loader was read."""
        return {r.distribution: dict(r.loader.variants) for r in self.releases if r.loader}

    def _where(self) -> str:
        return f" in {self.source}" if self.source else ""


def merge_versions(releases: Iterable[ReleaseFacts]) -> list[ReleaseFacts]:
    """One entry per distribution and distinct facts: versions whose modules (by path), CUDA
    requirements, loader and toolchain lookups are the same share an entry (their range), in
    version order."""
    out: list[ReleaseFacts] = []
    for rel in sorted(releases, key=lambda r: (r.distribution, _sort_key(r.versions[0]))):
        same = next(
            (o for o in out if o.distribution == rel.distribution and o._shape() == rel._shape()),
            None,
        )
        if same is None:
            out.append(rel)
            continue
        merged = replace(
            same,
            versions=tuple(dict.fromkeys([*same.versions, *rel.versions])),
            wheels=same.wheels + rel.wheels,
        )
        out[out.index(same)] = merged
    return out


def carry_when(old: Catalogue | None, new: Catalogue) -> tuple[Catalogue, list[str]]:
    """`new` with the ``when`` ranges of `old` (the file it replaces) kept where a release of
    the same distribution was read again with the same facts; and, one line each, the ranges
    dropped because the facts read differ now (a range is a claim about those facts)."""
    if old is None:
        return new, []
    kept: dict[str, list[str]] = {}
    dropped = []
    for was in old.releases:
        if not was.when:
            continue
        same = [r for r in new.releases if r.distribution == was.distribution
                and replace(r, when=())._shape() == replace(was, when=())._shape()]  # fmt: skip
        if same:
            for r in same:
                kept.setdefault(f"{r.distribution} {r.versions}", []).extend(was.when)
        else:
            dropped.append(
                f"{was.distribution} when {', '.join(was.when)}: dropped, the facts read for "
                f"{was.distribution} differ from those of {', '.join(was.versions)}"
            )
    releases = tuple(
        replace(r, when=tuple(dict.fromkeys([*r.when, *kept[k]])))
        if (k := f"{r.distribution} {r.versions}") in kept
        else r
        for r in new.releases
    )
    return replace(new, releases=releases), dropped


def _sort_key(version: str) -> Any:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


# --- TOML --------------------------------------------------------------------------------


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(str(k))} = {_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _module_doc(mod: ModuleFacts) -> dict[str, Any]:
    doc: dict[str, Any] = {"path": mod.path}
    if mod.error:
        doc["error"] = mod.error
        return doc
    if mod.device_code:
        doc["sass"] = list(mod.sass)
        doc["ptx"] = list(mod.ptx)
    else:
        doc["device_code"] = False  # "no device code", said as such
    if mod.relocatable:
        doc["relocatable"] = list(mod.relocatable)
    if mod.outside_count:
        doc["outside"] = {"containers": mod.outside_count, "targets": list(mod.outside)}
    if mod.cudart is not None:
        doc["cudart"] = mod.cudart
    if mod.nvcc:
        doc["nvcc"] = mod.nvcc
    if mod.not_on:
        doc["not_on"] = dict(mod.not_on)
    return doc


def _cubin_doc(cset: CubinSet) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": cset.name, "path": cset.path, "shipped": cset.shipped}
    for key in ("url", "url_env", "checksums_sha256", "files"):
        if getattr(cset, key):
            doc[key] = getattr(cset, key)
    doc["archs"] = list(cset.archs)
    for key in ("archs_from", "not_on", "unknown", "source", "shipped_in"):
        if getattr(cset, key):
            doc[key] = getattr(cset, key)
    return doc


def _cubin_set(doc: Any, where: str) -> CubinSet:
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise _bad(where, "a cubin_set needs a name")
    where = f"{where} cubin_set {doc['name']}"
    if not isinstance(doc.get("path"), str) or not isinstance(doc.get("shipped"), bool):
        raise _bad(where, "needs a path and shipped = true or false")
    reasons = {}
    for key in ("not_on", "unknown"):
        got = doc.get(key) or {}
        if not isinstance(got, dict) or not all(isinstance(v, str) for v in got.values()):
            raise _bad(where, f"{key}: expected {{ arch = reason }}")
        reasons[key] = dict(got)
    return CubinSet(
        name=doc["name"],
        path=doc["path"],
        shipped=doc["shipped"],
        url=str(doc.get("url", "")),
        url_env=str(doc.get("url_env", "")),
        checksums_sha256=str(doc.get("checksums_sha256", "")),
        files=int(doc.get("files", 0)),
        archs=_strs(doc.get("archs", []), f"{where} archs"),
        archs_from=str(doc.get("archs_from", "")),
        not_on=reasons["not_on"],
        unknown=reasons["unknown"],
        source=str(doc.get("source", "")),
        shipped_in=str(doc.get("shipped_in", "")),
    )


def _gate_doc(gate: ArchGate) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": gate.name, "kind": gate.kind, "archs": list(gate.archs)}
    doc["source"] = gate.source
    if gate.text:
        doc["text"] = gate.text
    if gate.not_on:
        doc["not_on"] = dict(gate.not_on)
    return doc


def _arch_gate(doc: Any, where: str) -> ArchGate:
    if not isinstance(doc, dict) or not all(
        isinstance(doc.get(k), str) for k in ("name", "kind", "source")
    ):
        raise _bad(where, "an arch_gate needs a name, kind and source")
    where = f"{where} arch_gate {doc['name']}"
    not_on = doc.get("not_on") or {}
    if not isinstance(not_on, dict) or not all(isinstance(v, str) for v in not_on.values()):
        raise _bad(where, "not_on: expected { arch = reason }")
    return ArchGate(
        name=doc["name"],
        kind=doc["kind"],
        archs=_strs(doc.get("archs", []), f"{where} archs"),
        source=doc["source"],
        text=str(doc.get("text", "")),
        not_on=dict(not_on),
    )


def dump(cat: Catalogue, header: list[str]) -> str:
    """The catalogue as TOML text, `header` lines as leading comments; releases by name."""
    lines = [f"# {h}" for h in header]
    lines += ["[catalogue]", f"format = {FORMAT}", f"targets = {_value(list(cat.targets))}"]
    if cat.aliases:
        lines.append(f"aliases = {_value(cat.aliases)}")
    for rel in sorted(cat.releases, key=lambda r: (r.distribution, _sort_key(r.versions[0]))):
        lines += ["", "[[release]]", f"distribution = {_value(rel.distribution)}"]
        lines.append(f"versions = {_value(list(rel.versions))}")
        if rel.cuda_requires:
            lines.append(f"cuda_requires = {_value(list(rel.cuda_requires))}")
        if rel.loader:
            ld = rel.loader
            lines.append(
                "loader = "
                + _value(
                    {
                        "package": ld.package,
                        "module": ld.module,
                        "variants": ld.variants,
                        "without_gpu": ld.without_gpu,
                        "source": ld.source,
                    }
                )
            )
        if rel.jit_lookup:
            lines.append(f"jit_lookup = {_value(list(rel.jit_lookup))}")
        if rel.when:
            lines.append(f"when = {_value(list(rel.when))}")
        for cset in rel.cubin_sets:
            lines += ["", "[[release.cubin_set]]"]
            lines += [f"{k} = {_value(v)}" for k, v in _cubin_doc(cset).items()]
        for gate in rel.arch_gates:
            lines += ["", "[[release.arch_gate]]"]
            lines += [f"{k} = {_value(v)}" for k, v in _gate_doc(gate).items()]
        for wheel in rel.wheels:
            lines += [
                "",
                "[[release.wheel]]",
                f"version = {_value(wheel.version)}",
                f"filename = {_value(wheel.filename)}",
                f"sha256 = {_value(wheel.sha256)}",
            ]
            if wheel.py_files is not None:
                lines.append(f"py_files = {wheel.py_files}")
            if wheel.modules:
                lines.append("modules = [")
                lines += [f"  {_value(_module_doc(m))}," for m in wheel.modules]
                lines.append("]")
            else:
                lines.append("modules = []")
    return "\n".join(lines) + "\n"


def _bad(where: str, what: str) -> RecipeError:
    return RecipeError(f"{where}: {what}")


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where, "expected a list of strings")
    return tuple(value)


def _module(doc: Any, where: str) -> ModuleFacts:
    if not isinstance(doc, dict) or not isinstance(doc.get("path"), str):
        raise _bad(where, "expected a module table with a path")
    outside = doc.get("outside") or {}
    not_on = doc.get("not_on") or {}
    if not isinstance(not_on, dict) or not all(isinstance(v, str) for v in not_on.values()):
        raise _bad(f"{where} {doc['path']}", "not_on: expected { arch = reason }")
    if doc.get("device_code") is False and (doc.get("sass") or doc.get("ptx")):
        raise _bad(f"{where} {doc['path']}", "device_code = false beside SASS or PTX targets")
    cudart = doc.get("cudart")
    return ModuleFacts(
        path=doc["path"],
        sass=_strs(doc.get("sass", []), f"{where} {doc['path']} sass"),
        ptx=_strs(doc.get("ptx", []), f"{where} {doc['path']} ptx"),
        relocatable=_strs(doc.get("relocatable", []), f"{where} {doc['path']} relocatable"),
        outside=_strs(outside.get("targets", []), f"{where} {doc['path']} outside"),
        outside_count=int(outside.get("containers", 0)),
        cudart=int(cudart) if cudart is not None else None,
        nvcc=doc.get("nvcc"),
        not_on=dict(not_on),
        error=str(doc.get("error") or ""),
    )


def _when(value: Any, where: str) -> tuple[str, ...]:
    specs = _strs(value, where)
    for s in specs:
        specifier(s, where)  # each one a PEP 440 specifier set, or one clear error
    return specs


def parse(doc: dict[str, Any], source: str = "") -> Catalogue:
    """A catalogue from its TOML document; RecipeError naming `source` and the entry."""
    head = doc.get("catalogue")
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise _bad(source, f"not a catalogue of format {FORMAT} (no [catalogue] format = 1)")
    releases = []
    for i, rel in enumerate(doc.get("release") or []):
        where = f"{source} release {i + 1}"
        if not isinstance(rel, dict) or not isinstance(rel.get("distribution"), str):
            raise _bad(where, "expected a distribution name")
        where = f"{source} {rel['distribution']}"
        versions = _strs(rel.get("versions"), f"{where} versions")
        if not versions:
            raise _bad(where, "versions: at least one version read")
        wheels = []
        for w in rel.get("wheel") or []:
            if not all(isinstance(w.get(k), str) for k in ("version", "filename", "sha256")):
                raise _bad(where, "a wheel needs version, filename and sha256")
            mods = tuple(_module(m, f"{where} {w['filename']}") for m in w.get("modules") or [])
            py = w.get("py_files")
            if py is not None and (not isinstance(py, int) or isinstance(py, bool) or py < 0):
                raise _bad(f"{where} {w['filename']}", f"py_files: expected a count, got {py!r}")
            wheels.append(WheelFacts(w["version"], w["filename"], w["sha256"], mods, py))
        ld = rel.get("loader")
        loader = None
        if isinstance(ld, dict):
            loader = LoaderFacts(
                package=str(ld.get("package", "")),
                module=str(ld.get("module", "")),
                variants={str(k): str(v) for k, v in (ld.get("variants") or {}).items()},
                without_gpu=str(ld.get("without_gpu", "")),
                source=str(ld.get("source", "")),
            )
        releases.append(
            ReleaseFacts(
                distribution=norm(rel["distribution"]),
                versions=versions,
                wheels=tuple(wheels),
                cuda_requires=_strs(rel.get("cuda_requires", []), f"{where} cuda_requires"),
                loader=loader,
                jit_lookup=_strs(rel.get("jit_lookup", []), f"{where} jit_lookup"),
                cubin_sets=tuple(_cubin_set(c, where) for c in rel.get("cubin_set") or []),
                when=_when(rel.get("when", []), f"{where} when"),
                arch_gates=tuple(_arch_gate(g, where) for g in rel.get("arch_gate") or []),
            )
        )
    aliases = head.get("aliases") or {}
    return Catalogue(
        releases=tuple(releases),
        targets=_strs(head.get("targets", ["12.0"]), f"{source} targets"),
        source=source,
        aliases={norm(k): norm(v) for k, v in aliases.items()},
    )


def load(path: Path, source: str = "") -> Catalogue:
    """The catalogue file at `path`; RecipeError (one line naming it) when it is unusable."""
    name = source or str(path)
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise RecipeError(f"{name}: cannot read the catalogue: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{name}: not TOML: {exc}") from None
    return replace(parse(doc, name), path=path)


def load_beside(lock_dir: Path, source: str = "") -> Catalogue | None:
    """The catalogue of a lock directory, or None when it has none (facts then unknown)."""
    path = lock_dir / FILE_NAME
    if not path.is_file():
        return None
    return load(path, source or str(path))


def save(path: Path, cat: Catalogue, header: list[str]) -> str:
    """Write the catalogue at `path` whole (a temporary file renamed over it, checked by
    reading it back first) and say what changed: ``written``, ``replaced`` or ``unchanged``."""

    text = dump(cat, header)
    check = parse(tomllib.loads(text), str(path))  # what is written reads back
    if check.releases != tuple(
        sorted(cat.releases, key=lambda r: (r.distribution, _sort_key(r.versions[0])))
    ):
        raise RecipeError(f"{path}: the catalogue does not read back as written; nothing written")
    old = path.read_text(encoding="utf-8") if path.is_file() else None
    if old is not None and old.split("[catalogue]", 1)[-1] == text.split("[catalogue]", 1)[-1]:
        return "unchanged"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make the file unreadable to others
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise RecipeError(f"{path}: cannot write the catalogue: {exc.strerror}") from None
    return "written" if old is None else "replaced"

"""Package descriptors by name and by build kind: the one place the ops, knobs, smoke and
tasks ask what is specific to a package. One descriptor type (`base.PackageDescriptor`):
a package the tool only installs from releases is a descriptor that does not build, and
`find` answers for every name a distribution is published under.

Like the store registry (`sm120kit.cache.registry`), descriptors that ship with sm120kit live
in modules named in :data:`BUILTIN_MODULES`, each exposing ``DESCRIPTORS``; they are imported
by name the first time anything is asked, so this module imports no descriptor. A package
outside the tool (a test fixture, a site's own kernel) is added with :func:`register`.
"""

from __future__ import annotations

import threading
from importlib import import_module

from packaging.utils import canonicalize_name

from .base import PackageDescriptor

#: Modules of the descriptors that ship with sm120kit, in the order smoke lists them.
BUILTIN_MODULES = (
    "sm120kit.packages.sgl_kernel",
    "sm120kit.packages.flash_attn",
    "sm120kit.packages.torch_ext",
    "sm120kit.packages.released",
)

#: The build kind of a recipe package that has no descriptor of its own.
DEFAULT_KIND = "torch-ext"

_DESCRIPTORS: list[PackageDescriptor] = []
_loaded = False
_lock = threading.Lock()


def _all() -> list[PackageDescriptor]:
    global _loaded
    if not _loaded:
        # Host threads may ask first and at once: one loads, the others wait for all of it.
        with _lock:
            if not _loaded:
                builtin = [d for m in BUILTIN_MODULES for d in import_module(m).DESCRIPTORS]
                _DESCRIPTORS[:0] = builtin
                _loaded = True
    return _DESCRIPTORS


def register(descriptor: PackageDescriptor) -> PackageDescriptor:
    """Add (or replace, by name and kind) a package's descriptor; returns it."""
    _all()
    unregister(descriptor)
    _DESCRIPTORS.append(descriptor)
    return descriptor


def unregister(descriptor: PackageDescriptor) -> None:
    """Remove a descriptor added with `register` (the one with its name and kind)."""
    # (name, kind) is a descriptor's identity: a release-only one has kind "".
    _DESCRIPTORS[:] = [d for d in _all() if (d.name, d.kind) != (descriptor.name, descriptor.kind)]


def descriptors() -> tuple[PackageDescriptor, ...]:
    """Every descriptor, built-in ones first."""
    return tuple(_all())


def _norm(name: str) -> str:
    """A distribution name as PEP 503 compares them (`SGLang_Kernel` is `sglang-kernel`)."""
    return str(canonicalize_name(name))


def published_names(desc: PackageDescriptor) -> tuple[str, ...]:
    """Every name `desc`'s distribution is published under, its own first."""
    return tuple(n for n in (desc.name, *desc.distributions) if n)


def find(name: str) -> PackageDescriptor | None:
    """The descriptor whose distribution is published under `name` (any of its names, any
    spelling PEP 503 treats as the same: ``sglang_kernel`` finds sgl-kernel's), or None."""
    key = _norm(name)
    return next((d for d in _all() if d.name and key in map(_norm, published_names(d))), None)


def descriptor(name: str) -> PackageDescriptor:
    """The descriptor building recipe package `name`, or the plain torch extension's (also for
    a package whose descriptor does not build: a recipe entry builds it as a torch extension)."""
    for d in _all():
        if d.name == name and d.builds:
            return d
    found = for_kind(DEFAULT_KIND)
    assert found is not None, "the torch-ext descriptor is built in"
    return found


def for_kind(kind: str) -> PackageDescriptor | None:
    """The descriptor building `kind` (the first registered), or None."""
    return next((d for d in _all() if d.builds and d.kind == kind), None)


def kinds() -> tuple[str, ...]:
    """The build kinds known, in registration order."""
    out: list[str] = []
    for d in _all():
        if d.builds and d.kind not in out:
            out.append(d.kind)
    return tuple(out)


def serving() -> tuple[PackageDescriptor, ...]:
    """The serving stack's packages smoke looks for in an env, in registration order."""
    return tuple(d for d in _all() if d.serving and d.name)


def smoke_defaults() -> tuple[str, ...]:
    """The packages ``smoke`` checks when neither --package nor a recipe names one."""
    return tuple(d.name for d in _all() if d.smoke_by_default and d.name)


def owners(predicate_name: str, value: object = True) -> list[str]:
    """Names of the descriptors whose field `predicate_name` is (or contains) `value`, for
    messages such as 'sm120_only is for sgl-kernel only'."""
    out = []
    for d in _all():
        field = getattr(d, predicate_name)
        hit = value in field if isinstance(field, tuple) else field == value
        if hit and d.name and d.name not in out:
            out.append(d.name)
    return out


def knob_names(field: str) -> tuple[str, ...]:
    """The union, in registration order, of a tuple field over every descriptor (the OOM
    retry's job and thread knobs)."""
    out: list[str] = []
    for d in _all():
        for name in getattr(d, field):
            if name not in out:
                out.append(name)
    return tuple(out)

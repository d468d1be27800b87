"""The descriptor of tests/fixtures/mypkg: a kernel package the tool does not ship, added the
way a site would add its own, by one descriptor (registered with
`sm120kit.packages.registry.register`) plus its recipe entry; no op names it."""

from __future__ import annotations

from sm120kit.builds.knobs import Knobs, plan_parallelism
from sm120kit.packages.base import KnobRequest, PackageDescriptor
from sm120kit.remote.lib.arch import Arch

NAME = "mypkg"


def mypkg_archs(archs: list[Arch]) -> str:
    """MYPKG_ARCHS for an arch list: SM numbers with their a/f suffix (``12.0a`` -> ``120a``);
    ``+PTX`` is dropped (the fixture builds SASS only)."""
    out: list[str] = []
    for arch in archs:
        code = f"{arch.sm}{arch.suffix}"
        if code not in out:
            out.append(code)
    return ";".join(out)


def mypkg_arch_problem(version: str, value: str) -> str | None:
    """The fixture's setup.py takes only SM numbers such as 120 or 120a."""
    bad = [e for e in value.split(";") if not e.rstrip("af").isdigit()]
    return f"MYPKG_ARCHS={value!r}: {', '.join(bad)} not like 120 or 120a" if bad else None


def mypkg_knobs(knobs: Knobs, req: KnobRequest) -> None:
    """MYPKG_ARCHS from the arch list; MAX_JOBS sized like any single-threaded nvcc build."""
    knobs.set_env("MYPKG_ARCHS", mypkg_archs(req.archs), "mypkg's own arch knob")
    knobs.note("TORCH_CUDA_ARCH_LIST", "(not used)", "mypkg's setup.py reads only MYPKG_ARCHS")
    jobs = req.given("MAX_JOBS")
    plan = plan_parallelism(
        req.cpus,
        req.mem_bytes,
        threads_default=1,
        gb_per_thread=req.gb_per_thread,
        jobs_override=jobs,
    )
    knobs.set_env("MAX_JOBS", plan.jobs, req.origin("MAX_JOBS") if jobs else plan.reason)


MYPKG = PackageDescriptor(
    name=NAME,
    kind=NAME,
    knobs=mypkg_knobs,
    arch_knob="MYPKG_ARCHS",
    arch_value=mypkg_archs,
    arch_value_problem=mypkg_arch_problem,
)

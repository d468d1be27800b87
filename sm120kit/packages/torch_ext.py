"""The plain torch extension (torch.utils.cpp_extension through setuptools): the build kind of
every recipe package without a descriptor of its own, and of the bundled sample kernel
``minikernel``, which smoke checks by default."""

from __future__ import annotations

from dataclasses import replace

from ..remote.lib.arch import Arch
from .base import KnobRequest, Knobs, PackageDescriptor, plan_parallelism


def arch_list_value(archs: list[Arch]) -> str:
    """TORCH_CUDA_ARCH_LIST for an arch list: the entries as given."""
    return ";".join(str(a) for a in archs)


def torch_ext_knobs(knobs: Knobs, req: KnobRequest) -> None:
    """TORCH_CUDA_ARCH_LIST and MAX_JOBS (one job = one single-threaded nvcc)."""
    knobs.set_env(
        "TORCH_CUDA_ARCH_LIST",
        arch_list_value(req.archs),
        "torch.utils.cpp_extension turns each entry into -gencode (12.0 -> sm_120, "
        "+PTX adds compute_120, 12.0a -> sm_120a)",
    )
    jobs = req.given("MAX_JOBS")
    plan = plan_parallelism(
        req.cpus,
        req.mem_bytes,
        threads_default=1,
        gb_per_thread=req.gb_per_thread,
        jobs_override=jobs,
    )
    knobs.set_env(
        "MAX_JOBS",
        plan.jobs,
        req.origin("MAX_JOBS")
        if jobs
        else f"{plan.reason} ({req.mem_what}); one job = one single-threaded compile",
    )


#: Any recipe package that names no descriptor of its own.
TORCH_EXT = PackageDescriptor(name="", kind="torch-ext", knobs=torch_ext_knobs)

#: The sample kernel the tool ships (tests/fixtures and the Quickstart).
MINIKERNEL = replace(TORCH_EXT, name="minikernel", smoke_by_default=True)

DESCRIPTORS = (TORCH_EXT, MINIKERNEL)

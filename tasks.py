"""invoke tasks: parse flags, call the library. `invoke --list` lists them, `invoke T --help` helps.

Every task takes -H/--host and -i/--inventory, and --json prints exactly one JSON document on
stdout. Exit status: 0 ok, 1 bad input, 2 a host failed or was unreachable, 3 interrupted.
"""

from __future__ import annotations

from invoke import Collection

from sm120kit import cli
from sm120kit.cli import guarded, task

HELP = {
    "host": "host, group, pattern (all:!gpu3, gpu*, a,b), 'local', or user@addr:port",
    "inventory": "inventory file (default from invoke.yaml: inventory/hosts.yaml)",
    "json": "print exactly one JSON document on stdout",
    "forks": "hosts worked on at once (0 = invoke.yaml's forks, default 16)",
    "accept_new_host_keys": "trust and record unknown SSH host keys (changed keys are still refused)",
    "ask_pass": "prompt for the SSH password (or set SM120KIT_SSH_PASSWORD)",
    "driver": "target NVIDIA driver version (for hosts without a GPU; overrides facts)",
    "arch": "target compute capability, e.g. 12.0 (for hosts without a GPU; overrides facts)",
    "recipe": "force this recipe (file stem under recipes/, e.g. r580)",
    "break_lock": "take over the per-host lock even if another run holds it",
    "package": "package name from the recipe (e.g. minikernel, flash-attn, sgl-kernel)",
    "explain": "print the resolved build env, flags and the reason for each",
    "max_jobs": "override MAX_JOBS (parallel compile jobs) for this run",
    "nvcc_threads": "override NVCC_THREADS / SGL_KERNEL_COMPILE_THREADS for this run",
    "recheck": "run the smoke checks even where a remembered verdict still applies",
    "python": "check this interpreter or venv instead of the recipe's managed env",
    "url": "server URL as seen from the host, e.g. http://127.0.0.1:8000",
    "timeout": "seconds to wait for readiness",
    "pid": "the server's process id on the host (for the evidence when the port is not open)",
    "process_match": "regex on the server's command line (default: sglang/vllm/uvicorn-like)",
}


def helps(*names: str) -> dict[str, str]:
    """Help texts for the named flags (invoke wants exactly the task's own parameters)."""
    return {n: HELP[n] for n in names}


COMMON = ("host", "inventory", "json", "forks", "accept_new_host_keys", "ask_pass")
RECIPE = ("driver", "arch", "recipe")


def _session(c, host, inventory, json, forks=0, accept_new_host_keys=False, ask_pass=False, **kw):
    return cli.open_session(
        c,
        host=host,
        inventory=inventory,
        forks=forks,
        json_output=json,
        accept_new_host_keys=accept_new_host_keys,
        ask_pass=ask_pass,
        **kw,
    )


def _plan_options(c, driver, arch, recipe, packages=None, **extra):
    from sm120kit.plan import PlanOptions
    from sm120kit.validate import check_recipe_flags

    opts = PlanOptions(
        driver=driver,
        arch=arch,
        recipe=recipe,
        packages=packages,
        recipes_dir=cli.settings(c).get("recipes_dir"),
        extra=extra,
    )
    if driver is not None or arch is not None or recipe is not None:
        check_recipe_flags(opts.recipes(), driver, arch, recipe)  # before any host is touched
    return opts


@task(help=helps(*COMMON))
@guarded()
def facts(
    c, host=None, inventory=None, json=False, forks=0, accept_new_host_keys=False, ask_pass=False
):
    """Gather host facts (OS, CPU, RAM, disk, compilers, Pythons, driver, GPUs, CUDA), one command per host."""
    from sm120kit.facts import facts_task
    from sm120kit.report import facts_table

    s = _session(c, host, inventory, json, forks, accept_new_host_keys, ask_pass)
    cli.finish(s, s.run("facts", facts_task), lambda out, r: out.print(facts_table(r)))


@task(help=helps("host", "inventory", "json"))
@guarded()
def inventory(c, host=None, inventory=None, json=False):
    """Show the resolved inventory: hosts, groups and vars (with where each var came from)."""
    cli.show_inventory(c, host=host, inventory=inventory, json_output=json)


@task(help=helps(*COMMON, *RECIPE))
@guarded()
def recipes(
    c,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    driver=None,
    arch=None,
    recipe=None,
):
    """List the recipes, or (with --host / --driver) which recipe each host gets and why."""
    from sm120kit import plan, report

    opts = _plan_options(c, driver, arch, recipe)
    if not host:
        cli.show_document(c, plan.recipes_catalog(opts, driver, arch), json, report.recipes_table)
        return
    s = _session(c, host, inventory, json, forks, accept_new_host_keys, ask_pass)
    opts.recipes()  # a broken recipe is one error before any host is touched
    cli.finish(s, s.run("recipes", plan.recipes_task(opts)), report.render_recipes)


@task(help=helps(*COMMON, *RECIPE, "explain"))
@guarded()
def plan(
    c,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    driver=None,
    arch=None,
    recipe=None,
    explain=False,
):
    """Check mode: per host the recipe, then every step as ok / would change, with its commands."""
    from sm120kit import provision, report

    opts = _plan_options(c, driver, arch, recipe, explain=explain)
    s = _session(c, host, inventory, json, forks, accept_new_host_keys, ask_pass, check_mode=True)
    opts.recipes()
    cli.finish(s, s.run("plan", provision.plan_or_provision_task(opts)), report.render_plan)


@task(help=helps(*COMMON, *RECIPE, "break_lock", "max_jobs", "nvcc_threads", "recheck"))
@guarded()
def provision(
    c,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    driver=None,
    arch=None,
    recipe=None,
    break_lock=False,
    max_jobs=0,
    nvcc_threads=0,
    recheck=False,
):
    """Toolkit, env, builds (through the wheel cache), smoke: in order, one run, one recap."""
    from sm120kit import provision, report

    opts = _plan_options(
        c, driver, arch, recipe, max_jobs=max_jobs, nvcc_threads=nvcc_threads, recheck=recheck
    )
    s = _session(
        c, host, inventory, json, forks, accept_new_host_keys, ask_pass, break_lock=break_lock
    )
    opts.recipes()
    cli.finish(
        s, s.run("provision", provision.plan_or_provision_task(opts), lock=True), report.render_plan
    )


@task(name="install-cuda", help=helps(*COMMON, *RECIPE, "break_lock"))
@guarded()
def install_cuda(
    c,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    driver=None,
    arch=None,
    recipe=None,
    break_lock=False,
):
    """Install the recipe's CUDA toolkit side by side (pip/runfile/apt) and verify nvcc."""
    from sm120kit import report
    from sm120kit.ops import toolkit

    opts = _plan_options(c, driver, arch, recipe)
    s = _session(
        c, host, inventory, json, forks, accept_new_host_keys, ask_pass, break_lock=break_lock
    )
    opts.recipes()
    cli.finish(
        s, s.run("install-cuda", toolkit.install_cuda_task(opts), lock=True), report.render_plan
    )


def _build(
    c,
    package,
    *,
    host,
    inventory,
    json,
    forks,
    accept_new_host_keys,
    ask_pass,
    driver,
    arch,
    recipe,
    break_lock,
    explain,
    max_jobs,
    nvcc_threads,
):
    from sm120kit.ops import build as build_ops

    if not package:
        raise cli.Sm120Error("--package is required (a package of the host's recipe)")
    opts = _plan_options(
        c,
        driver,
        arch,
        recipe,
        packages=[package],
        explain=explain,
        max_jobs=max_jobs,
        nvcc_threads=nvcc_threads,
    )
    s = _session(
        c, host, inventory, json, forks, accept_new_host_keys, ask_pass, break_lock=break_lock
    )
    opts.recipes()
    result = s.run(f"build:{package}", build_ops.build_task(opts, package, s.runner), lock=True)
    cli.finish(s, result, build_ops.render_build)


def _flags(local_vars):
    """A task body's flags, to hand on to the shared implementation."""
    return {k: v for k, v in local_vars.items() if k not in ("c", "package")}


BUILD_FLAGS = (*COMMON, *RECIPE, "break_lock", "explain", "max_jobs", "nvcc_threads")


@task(help=helps("package", *BUILD_FLAGS))
@guarded()
def build(
    c,
    package=None,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    driver=None,
    arch=None,
    recipe=None,
    break_lock=False,
    explain=False,
    max_jobs=0,
    nvcc_threads=0,
):
    """Build (or fetch from the wheel cache) and install one recipe package on the hosts."""
    _build(c, package, **_flags(locals()))


def _package_task(package, doc):
    """`build-<package>`: `build` with the package fixed."""

    def body(
        c,
        host=None,
        inventory=None,
        json=False,
        forks=0,
        accept_new_host_keys=False,
        ask_pass=False,
        driver=None,
        arch=None,
        recipe=None,
        break_lock=False,
        explain=False,
        max_jobs=0,
        nvcc_threads=0,
    ):
        _build(c, package, **_flags(locals()))

    body.__doc__ = doc
    return task(name=f"build-{package}", help=helps(*BUILD_FLAGS))(guarded()(body))


build_sgl_kernel = _package_task(
    "sgl-kernel", "Build sgl-kernel for the recipe's arch (CMake defines, SM120 loader patch)."
)
build_flash_attn = _package_task(
    "flash-attn",
    "Build flash-attn for the recipe's arch (FLASH_ATTN_CUDA_ARCHS, forced source build).",
)


@task(help=helps(*COMMON, "package", "python", "arch", "driver", "recipe"))
@guarded()
def smoke(
    c,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    package=None,
    python=None,
    arch=None,
    driver=None,
    recipe=None,
):
    """Check installed kernel packages: import order, undefined symbols, arch coverage, loader."""
    from sm120kit.ops import smoke as smoke_ops

    opts = _plan_options(c, driver, arch, recipe, packages=[package] if package else None)
    s = _session(c, host, inventory, json, forks, accept_new_host_keys, ask_pass)
    task_fn = smoke_ops.smoke_task(opts, package=package, python=python, arch=arch)
    cli.finish(s, s.run("smoke", task_fn), smoke_ops.render)


@task(name="serve-check", help=helps(*COMMON, "url", "timeout", "pid", "process_match"))
@guarded()
def serve_check(
    c,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    url="http://127.0.0.1:8000",
    timeout=600.0,
    pid=0,
    process_match=None,
):
    """Poll /health and /v1/models until ready; on timeout show why (alive? CPU? ports? stacks)."""
    from sm120kit.ops import smoke as smoke_ops

    s = _session(c, host, inventory, json, forks, accept_new_host_keys, ask_pass)
    cli.finish(
        s,
        s.run(
            "serve-check",
            smoke_ops.serve_check_task(
                url, float(timeout), pid=pid or None, process_match=process_match
            ),
        ),
        smoke_ops.render_serve,
    )


# -- cache.* -----------------------------------------------------------------------------------

CACHE_HELP = {
    "older_than": "prune entries older than this many days",
    "keep": "prune all but the newest N entries per package",
    "max_size": "prune least recently used entries until the store is below this (e.g. 50G)",
    "store": "only this store (name from invoke.yaml's cache.stores, or 'local')",
    "directory": "directory to export to / import from (usable with pip --find-links)",
}


@task(name="key", help={**helps(*COMMON, *RECIPE, "package")})
@guarded()
def cache_key(
    c,
    package=None,
    host=None,
    inventory=None,
    json=False,
    forks=0,
    accept_new_host_keys=False,
    ask_pass=False,
    driver=None,
    arch=None,
    recipe=None,
):
    """Show every input of a package's wheel-cache key on each host, and the key."""
    from sm120kit.ops import build as build_ops

    if not package:
        raise cli.Sm120Error("--package is required")
    opts = _plan_options(c, driver, arch, recipe, packages=[package])
    s = _session(c, host, inventory, json, forks, accept_new_host_keys, ask_pass)
    opts.recipes()
    cli.finish(s, s.run("cache.key", build_ops.key_task(opts, package)), build_ops.render_key)


@task(name="list", help=helps("json") | {"store": CACHE_HELP["store"]})
@guarded()
def cache_list(c, json=False, store=None):
    """List cached wheels: package, version, key, arch, CUDA, torch, size, age, hits."""
    from sm120kit import cli_cache

    cli_cache.list_command(c, json_output=json, store=store)


@task(name="verify", help=helps("json") | {"store": CACHE_HELP["store"]})
@guarded()
def cache_verify(c, json=False, store=None):
    """Check every entry's sha256; corrupt entries are quarantined."""
    from sm120kit import cli_cache

    cli_cache.verify_command(c, json_output=json, store=store)


@task(
    name="prune",
    help=helps("json") | {k: CACHE_HELP[k] for k in ("older_than", "keep", "max_size", "store")},
)
@guarded()
def cache_prune(c, json=False, older_than=0.0, keep=0, max_size=None, store=None):
    """Remove entries by age, keep-N per package, or total size."""
    from sm120kit import cli_cache

    cli_cache.prune_command(
        c,
        json_output=json,
        older_than_days=older_than or None,
        keep=keep or None,
        max_size=max_size,
        store=store,
    )


@task(
    name="export",
    positional=["directory"],
    help=helps("json") | {"directory": CACHE_HELP["directory"], "store": CACHE_HELP["store"]},
)
@guarded()
def cache_export(c, directory=None, json=False, store=None):
    """Write every cached wheel into DIR (pip install --find-links DIR works offline)."""
    from sm120kit import cli_cache

    cli_cache.export_command(c, directory, json_output=json, store=store)


@task(
    name="import",
    positional=["directory"],
    help=helps("json") | {"directory": CACHE_HELP["directory"], "store": CACHE_HELP["store"]},
)
@guarded()
def cache_import(c, directory=None, json=False, store=None):
    """Read a directory written by cache.export back into a store."""
    from sm120kit import cli_cache

    cli_cache.import_command(c, directory, json_output=json, store=store)


cache = Collection(
    "cache", cache_key, cache_list, cache_verify, cache_prune, cache_export, cache_import
)


@task(
    name="fetch",
    help=helps("json", "recipe")
    | {
        "package": "package whose source and dependencies to fetch (e.g. sgl-kernel)",
        "mirror": "directory holding <dir>/ per source (default: setting sources_mirror)",
    },
)
@guarded()
def sources_fetch(c, package=None, recipe=None, mirror=None, json=False):
    """Fetch a package's pinned source and build dependencies into the controller store."""
    from sm120kit.ops import sources as sources_ops

    if not package:
        raise cli.Sm120Error("--package is required (e.g. sgl-kernel)")
    sources_ops.fetch_command(c, package=package, recipe=recipe, mirror=mirror, json_output=json)


@task(name="list", help=helps("json"))
@guarded()
def sources_list(c, json=False):
    """List the controller's source store: each tree with its digest and size."""
    from sm120kit.ops import sources as sources_ops

    sources_ops.list_command(c, json_output=json)


sources = Collection("sources", sources_fetch, sources_list)
ns = Collection(
    facts,
    inventory,
    recipes,
    plan,
    provision,
    install_cuda,
    build,
    build_sgl_kernel,
    build_flash_attn,
    smoke,
    serve_check,
    cache,
    sources,
)

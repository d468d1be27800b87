"""invoke tasks: parse flags, call the library. `invoke --list` lists them, `invoke T --help` helps.

Every task takes -H/--host and -i/--inventory, and --json prints exactly one JSON document on
stdout. Exit status: 0 ok, 1 bad input, 2 a host failed or was unreachable, 3 interrupted.
Each task names the flags it takes (declared once, with defaults and help, in
sm120kit/cli/flags.py); its body gets them as keyword arguments (`**f`).
"""

from __future__ import annotations

from sm120kit.runner.interrupts import install as _install_interrupts

# First, before the heavy imports: a signal while the rest loads is exit 3 and one line.
_install_interrupts()

from typing import Any  # noqa: E402

from invoke import Collection  # noqa: E402

from sm120kit.cli import core as cli  # noqa: E402
from sm120kit.cli import errors as cli_errors  # noqa: E402
from sm120kit.cli.core import task  # noqa: E402
from sm120kit.cli.flags import BUILD, COMMON, RECIPE  # noqa: E402
from sm120kit.packages import registry  # noqa: E402

# invoke's parser errors and unmergeable config files: one line, JSON under --json, exit 1.
cli_errors.install()


def _session(c: Any, f: dict[str, Any], **kw: Any) -> cli.Session:
    """A session from the common flags (`f`: the task's flags) plus task-specific options."""
    return cli.open_session(
        c,
        host=f["host"],
        inventory=f["inventory"],
        forks=f["forks"],
        json_output=f["json"],
        accept_new_host_keys=f["accept_new_host_keys"],
        ask_pass=f["ask_pass"],
        **kw,
    )


def _plan_options(c, f, packages=None, **flags):
    from sm120kit.engines import check_name
    from sm120kit.plays.plan import PlanOptions
    from sm120kit.runner.run_flags import RunFlags
    from sm120kit.validate import check_recipe_flags

    driver, arch, recipe = f["driver"], f["arch"], f["recipe"]
    check_name(f.get("engine"), "--engine")  # before any host is touched
    opts = PlanOptions(
        driver=driver,
        arch=arch,
        recipe=recipe,
        engine=f.get("engine"),
        packages=packages,
        recipes_dir=cli.settings(c).get("recipes_dir"),
        flags=RunFlags.from_mapping(flags),
    )
    if flags.get("stack") and flags.get("no_stack"):
        from sm120kit.errors import RecipeError

        raise RecipeError("--stack and --no-stack both given: choose one")
    if driver is not None or arch is not None or recipe is not None:
        check_recipe_flags(opts.recipes(), driver, arch, recipe)  # before any host is touched
    return opts


def _check_recipes(s: cli.Session, opts: Any) -> None:
    """Load the recipes and check each selected host's `recipe.*` vars against them: a broken
    recipe or a bad override is one error (exit 1) before any host is touched."""
    from sm120kit.recipes.select import check_overrides

    recipes = opts.recipes()
    for h in s.hosts:
        check_overrides(recipes, h)


@task(*COMMON)
def facts(c, **f):
    """Gather host facts (OS, CPU, RAM, disk, compilers, Pythons, driver, GPUs, CUDA), one command per host."""
    from sm120kit.output.report import facts_table
    from sm120kit.plays.facts import facts_op

    s = _session(c, f)
    cli.finish(s, s.run("facts", facts_op), lambda out, r: out.print(facts_table(r)))


@task("host", "inventory", "json")
def inventory(c, **f):
    """Show the resolved inventory: hosts, groups and vars (with where each var came from)."""
    cli.show_inventory(c, host=f["host"], inventory=f["inventory"], json_output=f["json"])


@task(*COMMON, *RECIPE)
def recipes(c, **f):
    """List the recipes, or (with --host / --driver) which recipe each host gets and why."""
    from sm120kit.output import listings, report
    from sm120kit.output.console import show_document
    from sm120kit.plays import plan

    opts = _plan_options(c, f)
    if not f["host"]:
        catalog = plan.recipes_catalog(opts, f["driver"], f["arch"])
        show_document(catalog, f["json"], listings.recipes_table)
        return
    s = _session(c, f)
    _check_recipes(s, opts)
    cli.finish(s, s.run("recipes", plan.recipes_op(opts)), report.render_recipes)


@task(
    *COMMON,
    *RECIPE,
    "explain",
    "package",
    "stack",
    "no_stack",
    "engine",
    "verbose",
    "no_system_python",
)
def plan(c, **f):
    """Check mode: per host the recipe, then every step as ok / would change, with its commands
    (with --package: the dry run of `invoke build --package P`, its steps only)."""
    from sm120kit.output import report
    from sm120kit.plays import provision

    if f["package"]:
        _build(c, f["package"], f, check=True)
        return
    opts = _plan_options(
        c,
        f,
        explain=f["explain"],
        stack=f["stack"],
        no_stack=f["no_stack"],
        no_system_python=f["no_system_python"],
    )
    s = _session(c, f, check_mode=True)
    _check_recipes(s, opts)
    result = s.run("plan", provision.plan_or_provision_op(opts))
    if f["explain"]:
        report.print_explain(result)
    cli.finish(s, result, lambda out, r: report.render_plan(out, r, verbose=f["verbose"]))


@task(
    *COMMON,
    *RECIPE,
    "break_lock",
    "max_jobs",
    "nvcc_threads",
    "rebuild",
    "recheck",
    "stack",
    "no_stack",
    "engine",
    "verbose",
    "no_system_python",
)
def provision(c, **f):
    """Toolkit, env, builds (through the wheel cache), serving stack, smoke: one run, one recap."""
    from sm120kit.output import report
    from sm120kit.plays import provision

    opts = _plan_options(
        c,
        f,
        max_jobs=f["max_jobs"],
        nvcc_threads=f["nvcc_threads"],
        rebuild=f["rebuild"],
        recheck=f["recheck"],
        stack=f["stack"],
        no_stack=f["no_stack"],
        no_system_python=f["no_system_python"],
    )
    s = _session(c, f, break_lock=f["break_lock"])
    _check_recipes(s, opts)
    result = s.run("provision", provision.plan_or_provision_op(opts), lock=True)
    cli.finish(s, result, lambda out, r: report.render_plan(out, r, verbose=f["verbose"]))


@task(*COMMON, *RECIPE, "break_lock", name="install-cuda")
def install_cuda(c, **f):
    """Install the recipe's CUDA toolkit side by side (pip/runfile/apt) and verify nvcc."""
    from sm120kit.output import report
    from sm120kit.plays import toolkit

    opts = _plan_options(c, f)
    s = _session(c, f, break_lock=f["break_lock"])
    _check_recipes(s, opts)
    cli.finish(
        s, s.run("install-cuda", toolkit.install_cuda_op(opts), lock=True), report.render_plan
    )


def _build(c, package, f, check=False):
    """`build` and `build-<package>`; with `check` (`plan --package`) its dry run: the same
    operation in check mode, every step shown as ok / would change with its commands."""
    from sm120kit.output import report
    from sm120kit.plays import build as build_ops

    if not package:
        raise cli.Sm120Error("--package is required (a package of the host's recipe)")
    opts = _plan_options(
        c,
        f,
        packages=[package],
        explain=f["explain"],
        rebuild=f.get("rebuild", False),
        max_jobs=f.get("max_jobs", 0),
        nvcc_threads=f.get("nvcc_threads", 0),
    )
    known = sorted({p.name for r in opts.recipes().values() for p in r.packages})
    if package not in known:
        raise cli.Sm120Error(f"--package {package!r}: no recipe has it (have: {', '.join(known)})")
    if check:
        s = _session(c, f, check_mode=True)
    else:
        s = _session(c, f, break_lock=f["break_lock"])
    _check_recipes(s, opts)
    op = build_ops.build_op(opts)  # the package is opts' one --package
    result = s.run("plan" if check else f"build:{package}", op, lock=not check)
    if f["explain"]:
        report.print_explain(result)
    cli.finish(s, result, report.render_plan if check else report.render_build)


@task("package", *BUILD)
def build(c, **f):
    """Build (or fetch from the wheel cache) and install one recipe package on the hosts."""
    _build(c, f["package"], f)


def _package_task(desc):
    """`build-<package>`: `build` with the package fixed; its descriptor `desc` gives the name
    and the help line."""

    def body(c, **f):
        _build(c, desc.name, f)

    body.__doc__ = desc.build_task
    return task(*BUILD, name=f"build-{desc.name}")(body)


#: `build-<package>` for each package whose descriptor asks for its own task.
package_builds = [_package_task(d) for d in registry.descriptors() if d.build_task]


@task(*COMMON, "package", "python", "arch", "driver", "recipe", "engine")
def smoke(c, **f):
    """Check installed kernel packages: import order, undefined symbols, arch coverage, loader."""
    from sm120kit.output import checks
    from sm120kit.plays import smoke as smoke_check

    package = f["package"]
    opts = _plan_options(c, f, packages=[package] if package else None)
    s = _session(c, f)
    _check_recipes(s, opts)
    op = smoke_check.smoke_op(opts, package=package, python=f["python"], arch=f["arch"])
    cli.finish(s, s.run("smoke", op), checks.render_smoke)


@task(
    *COMMON,
    "url",
    "timeout",
    "pid",
    "process_match",
    "launch",
    "python",
    "strict",
    "model_config",
    "engine",
    *RECIPE,
    name="serve-check",
)
def serve_check(c, **f):
    """Poll /health and /v1/models until ready; on timeout show why (alive? CPU? ports? stacks).
    With a launch (--launch or words after --): preflight it, start it, then watch it."""
    from sm120kit.output import checks
    from sm120kit.plays import serve_check as serve_ops
    from sm120kit.preflight import launch
    from sm120kit.validate import check_regex

    check_regex(f["process_match"], "--process-match")
    words = launch.launch_words(f["launch"])
    if words:
        from sm120kit.plays import serve_launch

        if f["pid"] or f["process_match"]:
            raise cli.Sm120Error(
                "--pid / --process-match name a server started by other means; with a launch "
                "the launched server is watched"
            )
        opts = _plan_options(c, f)  # --engine checked first
        parsed = launch.parse_launch(words, default=f["engine"])
        s = _session(c, f)
        op = serve_launch.serve_launch_op(
            opts,
            parsed,
            float(f["timeout"]),
            python=f["python"],
            arch=f["arch"],
            strict=f["strict"],
            model_config=f["model_config"],
        )
        cli.finish(s, s.run("serve-check", op), checks.render_serve_launch)
        return
    if f["strict"] or f["model_config"] or f["engine"]:
        raise cli.Sm120Error(
            "--strict / --model-config / --engine judge a launch: give one after --"
        )
    s = _session(c, f)
    op = serve_ops.serve_check_op(
        f["url"], float(f["timeout"]), pid=f["pid"] or None, process_match=f["process_match"]
    )
    cli.finish(s, s.run("serve-check", op), checks.render_serve)


@task(*COMMON, "python", "launch", "strict", "model_config", "stop_warm", "engine", *RECIPE)
def preflight(c, **f):
    """Judge an SGLang launch on each host before it runs: backends' code for the GPU, known-bad
    combinations, TP vs GPUs, GPU memory held, port, model path. Launch words after --."""
    from sm120kit.output import checks
    from sm120kit.plays import preflight as preflight_check
    from sm120kit.preflight import launch

    if f["stop_warm"]:
        s = _session(c, f)
        op = preflight_check.stop_warm_op()
        cli.finish(s, s.run("preflight.stop-warm", op), checks.render_stop_warm)
        return
    words = launch.launch_words(f["launch"])
    opts = _plan_options(c, f)  # --engine checked first
    parsed = launch.parse_launch(words, default=f["engine"])
    s = _session(c, f)
    op = preflight_check.preflight_op(
        opts,
        parsed,
        python=f["python"],
        arch=f["arch"],
        strict=f["strict"],
        model_config=f["model_config"],
    )
    cli.finish(s, s.run("preflight", op), checks.render_preflight)


# -- cache.* -----------------------------------------------------------------------------------


@task("package", *COMMON, *RECIPE, name="key")
def cache_key(c, **f):
    """Show every input of a package's wheel-cache key on each host, and the key."""
    from sm120kit.output import report
    from sm120kit.plays import build as build_ops

    package = f["package"]
    if not package:
        raise cli.Sm120Error("--package is required")
    opts = _plan_options(c, f, packages=[package])
    s = _session(c, f)
    _check_recipes(s, opts)
    cli.finish(s, s.run("cache.key", build_ops.key_op(opts)), report.render_key)


@task("json", "store", name="list")
def cache_list(c, **f):
    """List cached wheels: package, version, key, arch, CUDA, torch, size, age, hits."""
    from sm120kit.cli import cache as cli_cache

    cli_cache.list_command(c, json_output=f["json"], store=f["store"])


@task("json", "store", name="verify")
def cache_verify(c, **f):
    """Check every entry's sha256; corrupt entries are quarantined."""
    from sm120kit.cli import cache as cli_cache

    cli_cache.verify_command(c, json_output=f["json"], store=f["store"])


@task("json", "older_than", "keep", "max_size", "store", name="prune")
def cache_prune(c, **f):
    """Remove entries by age, keep-N per package, or total size."""
    from sm120kit.cli import cache as cli_cache

    cli_cache.prune_command(
        c,
        json_output=f["json"],
        older_than_days=f["older_than"],
        keep=f["keep"],
        max_size=f["max_size"],
        store=f["store"],
    )


@task("directory", "json", "store", name="export", positional=["directory"])
def cache_export(c, **f):
    """Write every cached wheel into DIR (pip install --find-links DIR works offline)."""
    from sm120kit.cli import cache as cli_cache

    cli_cache.export_command(c, f["directory"], json_output=f["json"], store=f["store"])


@task("directory", "json", "store", name="import", positional=["directory"])
def cache_import(c, **f):
    """Read a directory written by cache.export back into a store."""
    from sm120kit.cli import cache as cli_cache

    cli_cache.import_command(c, f["directory"], json_output=f["json"], store=f["store"])


cache = Collection(
    "cache", cache_key, cache_list, cache_verify, cache_prune, cache_export, cache_import
)


@task(
    "package",
    "recipe",
    "mirror",
    "refresh",
    "json",
    name="fetch",
    help={"package": "package whose source and dependencies to fetch (e.g. sgl-kernel)"},
)
def sources_fetch(c, **f):
    """Fetch a package's pinned source and build dependencies into the controller store."""
    from sm120kit.cli import sources as cli_sources

    if not f["package"]:
        raise cli.Sm120Error("--package is required (e.g. sgl-kernel)")
    cli_sources.fetch_command(
        c,
        package=f["package"],
        recipe=f["recipe"],
        mirror=f["mirror"],
        json_output=f["json"],
        refresh=f["refresh"],
    )


@task("json", name="list")
def sources_list(c, **f):
    """List the controller's source store: each tree with its digest and size."""
    from sm120kit.cli import sources as cli_sources

    cli_sources.list_command(c, json_output=f["json"])


sources = Collection("sources", sources_fetch, sources_list)


@task(
    "top",
    "recipe",
    "out",
    "platform",
    "index",
    "constraint",
    "lock_python",
    "driver",
    "arch",
    "json",
    name="draft",
    iterable=["index", "constraint"],
)
def lock_draft(c, **f):
    """Draft --top's locks with uv, one per Python, and the recipe's [stack] edit."""
    from sm120kit.cli import lock as cli_lock

    cli_lock.draft_command(c, **f)


@task("path", "out", "json", name="convert")
def lock_convert(c, **f):
    """Convert a lock in the earlier format to PEP 751 (locks/<top>-<version>/pylock.*.toml)."""
    from sm120kit.cli import lock as cli_lock

    cli_lock.convert_command(c, **f)


@task("lock_dir", "arch", "json", name="catalogue")
def lock_catalogue(c, **f):
    """Regenerate --lock-dir's catalogue.toml from its locks' wheels."""
    from sm120kit.cli import lock as cli_lock

    cli_lock.catalogue_command(c, **f)


lock = Collection("lock", lock_draft, lock_convert, lock_catalogue)
ns = Collection(
    facts,
    inventory,
    recipes,
    plan,
    provision,
    install_cuda,
    build,
    *package_builds,
    smoke,
    serve_check,
    preflight,
    cache,
    sources,
    lock,
)

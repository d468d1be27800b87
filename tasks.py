"""invoke tasks: parse flags, call the library. Run `invoke --list` for the list."""

from __future__ import annotations

from invoke import Collection

from sm120kit import cli
from sm120kit.cli import guarded, task
from sm120kit.facts import facts_task
from sm120kit.report import facts_table

HELP = {
    "host": "host, group, pattern (all:!gpu3, gpu*, a,b), 'local', or user@addr:port",
    "inventory": "inventory file (default from invoke.yaml: inventory/hosts.yaml)",
    "json": "print exactly one JSON document on stdout",
    "forks": "hosts worked on at once (0 = invoke.yaml's forks, default 16)",
    "accept_new_host_keys": "trust and record unknown SSH host keys (changed keys are still refused)",
}


def helps(*names: str) -> dict[str, str]:
    """Help texts for the named flags (invoke wants exactly the task's own parameters)."""
    return {n: HELP[n] for n in names}


@task(help=helps("host", "inventory", "json", "forks", "accept_new_host_keys"))
@guarded()
def facts(c, host=None, inventory=None, json=False, forks=0, accept_new_host_keys=False):
    """Gather host facts (OS, CPU, RAM, disk, compilers, Pythons, driver, GPUs, CUDA) with one command per host."""
    s = cli.open_session(
        c,
        host=host,
        inventory=inventory,
        forks=forks,
        json_output=json,
        accept_new_host_keys=accept_new_host_keys,
    )
    result = s.run("facts", facts_task)
    cli.finish(s, result, lambda out, r: out.print(facts_table(r)))


@task(help=helps("host", "inventory", "json"))
@guarded()
def inventory(c, host=None, inventory=None, json=False):
    """Show the resolved inventory: hosts, groups and vars (with where each var came from)."""
    cli.show_inventory(c, host=host, inventory=inventory, json_output=json)


ns = Collection(facts, inventory)

"""The in-env resolvers the hosts' bundle carries and the engines that name them agree: each
registered engine's `Engine.resolver` is a bundled in_target script that defines
``_run_cases``, and each such script belongs to an engine (no list of names to keep in step)."""

from __future__ import annotations

from sm120kit import engines
from sm120kit.remote.lib.targets import RESOLVE_SERVERS, RESOLVER_NAMES, RESOLVERS


def test_every_engine_has_a_bundled_resolver_and_every_resolver_an_engine() -> None:
    named = {engines.find(name).resolver for name in engines.names()}  # type: ignore[union-attr]
    assert named == set(RESOLVER_NAMES)
    assert set(RESOLVERS) == set(RESOLVE_SERVERS) == named


def test_the_helpers_that_are_not_resolvers_are_not_taken_for_one() -> None:
    assert not {"prelude", "resolve_server", "load", "gpu_op"} & set(RESOLVER_NAMES)
    for name in RESOLVER_NAMES:
        assert "def _setup(" in RESOLVERS[name] and RESOLVE_SERVERS[name].count("_SERVE = True")

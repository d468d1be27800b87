"""A package's source as the build sees it: the tree on a host (`Source`, what ``source:<pkg>``
gives the patch and build steps) and the controller's source store record for an entry
(`store_record`, fetched once per run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..runner.pool import HostContext
from ..state import ProvisionState
from . import sources as srcstore


@dataclass
class Source:
    """A source tree on the host (or, in check mode, where it would be)."""

    path: str
    digest: str
    present: bool


def store_record(
    ctx: HostContext, state: ProvisionState, entry: srcstore.SourceEntry
) -> dict[str, Any] | None:
    """`entry` in the controller's source store: fetched there (once per run) unless this is
    check mode, where a missing entry gives None."""
    settings = ctx.runner.settings
    store = srcstore.store_dir(settings)
    have = srcstore.read_record(store, entry)
    if have is not None or ctx.check_mode:
        return have
    mirror = srcstore.mirror_setting(settings, state.host.vars) or None
    record, _ = ctx.runner.shared.once(
        f"store:{entry.package}:{entry.slot}",
        lambda: srcstore.fetch_entry(store, entry, mirror),
    )
    return dict(record)

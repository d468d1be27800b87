"""One GPU arch, in every spelling the tool accepts: parsed once here, rendered per consumer.

Spellings (case-insensitive unless `Arch.parse_entry` is asked for the strict form):

- TORCH_CUDA_ARCH_LIST entries: ``12.0``, ``12.0a``, ``12.0f``, ``12.0+PTX``;
- SM numbers and device-code names: ``120``, ``120a``, ``sm_120``, ``sm_120a``, ``compute_120``,
  ``compute_120f``;
- a capability as data: ``(12, 0)``, ``[12, 0]``, the number ``12.0``.

Renderings: ``str(arch)`` (the list entry, ``12.0a+PTX``), `cc` / `cc_text` (the capability,
``12.0``), `sm_code` (``sm_120a``), `compute_code` (``compute_120a``).

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Tuple

#: The recipe's arch list and TORCH_CUDA_ARCH_LIST: dotted, lower-case suffix, "+PTX".
_ENTRY = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_DOTTED = re.compile(r"^(\d+)\.(\d+)([af]?)(\+ptx)?$")
_CODE = re.compile(r"^(?:(sm|compute)_)?(\d+)(\d)([af]?)$")


@dataclass(frozen=True)
class Arch:
    """A compute capability plus what the code for it is: ``a`` (arch-specific) or ``f``
    (family) suffix, and whether PTX is wanted besides SASS."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @classmethod
    def parse(cls, value: Any) -> Arch:
        """Any accepted spelling (see the module doc); ValueError naming the value otherwise."""
        if isinstance(value, (list, tuple)) and len(value) == 2:
            try:
                return cls(int(value[0]), int(value[1]))
            except (TypeError, ValueError):
                pass
        text = str(value).strip().lower() if value is not None else ""
        m = _DOTTED.match(text)
        if m:
            return cls(int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4)))
        m = _CODE.match(text)
        if m:
            return cls(int(m.group(2)), int(m.group(3)), m.group(4), m.group(1) == "compute")
        raise ValueError("not a compute capability: %r (e.g. 12.0 or sm_120)" % (value,))

    @classmethod
    def parse_entry(cls, text: str) -> Arch:
        """One entry of an arch list in the strict TORCH_CUDA_ARCH_LIST spelling (``12.0``,
        ``12.0a``, ``12.0f``, ``12.0+PTX``); ValueError naming the entry otherwise."""
        m = _ENTRY.match(str(text))
        if not m:
            raise ValueError("'%s' is not an arch like 12.0, 12.0a or 12.0+PTX" % (text,))
        return cls(int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4)))

    @property
    def sm(self) -> int:
        """The SM number: 120 for 12.0."""
        return self.major * 10 + self.minor

    @property
    def cc(self) -> Tuple[int, int]:
        """The compute capability (12, 0)."""
        return self.major, self.minor

    @property
    def cc_text(self) -> str:
        """The compute capability as ``12.0``."""
        return "%d.%d" % (self.major, self.minor)

    @property
    def sm_code(self) -> str:
        """The SASS target: ``sm_120``, ``sm_120a``, ``sm_120f``."""
        return "sm_%d%s" % (self.sm, self.suffix)

    @property
    def compute_code(self) -> str:
        """The PTX target: ``compute_120``, ``compute_120a``, ``compute_120f``."""
        return "compute_%d%s" % (self.sm, self.suffix)

    def __str__(self) -> str:
        return "%d.%d%s%s" % (self.major, self.minor, self.suffix, "+PTX" if self.ptx else "")


def parse_list(items: Any) -> List[Arch]:
    """An arch list from ``["12.0", "9.0a"]`` or ``"12.0;9.0a"`` (``,`` and spaces also
    separate), strict spelling; ValueError naming the first bad entry, or the empty list."""
    if isinstance(items, str):
        entries = items.replace(",", ";").replace(" ", ";").split(";")
    else:
        entries = [str(a).strip() for a in items]
    archs = [Arch.parse_entry(e) for e in entries if e]
    if not archs:
        raise ValueError("the arch list is empty")
    return archs

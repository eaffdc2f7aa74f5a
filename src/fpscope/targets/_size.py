"""Refuse a target whose operands cannot fit in memory before allocating them.

A reveal holds the op's input and at least one probe row of n values (fpscope.reveal.Prober);
building an input of billions of elements and running out of memory halfway took minutes, so
a target checks the bytes it needs against the memory the OS reports available first.
"""

from __future__ import annotations

import os

from .base import TargetError


def available_bytes() -> int | None:
    """Memory the OS can give this process now: MemAvailable of /proc/meminfo (Linux), else
    free physical pages (``os.sysconf``); None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"


def check_memory(name: str, n: int, elements: int, itemsize: int, fmt: str,
                 available: int | None = None) -> None:
    """Refuse a target of ``elements`` input values (``itemsize`` bytes each, format ``fmt``)
    and n leaves when its input and one probe row of n values do not fit in ``available``
    bytes (default :func:`available_bytes`; no check where that is unknown).

    Raises:
        TargetError: one line with the bytes needed and available.
    """
    need = (int(elements) + int(n)) * int(itemsize)
    avail = available_bytes() if available is None else available
    if avail is None or need <= avail:
        return
    raise TargetError(
        f"{name}: n = {n:,} is too large for this machine: the input ({elements:,} {fmt} "
        f"values) and one probe row need at least {_gb(need)}, and {_gb(avail)} of memory is "
        f"available; use a smaller n or shape")

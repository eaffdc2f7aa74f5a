"""Collectives whose order is not fixed: reveal again with fresh ranks, count what comes back.

A library may choose its algorithm per communicator (tuning at start-up, topology, runtime
state; NCCL picks ring or tree and a channel count), so one reveal shows one of several
possible orders. :func:`reveal_runs` reveals the collective ``runs`` times, each time with
newly started ranks (a new target from ``build()``), and reports the distinct outcomes (the
trees of every element, by class) with how often each came back; runs that could not be
revealed (the order changed between calls of one run) are counted with their reason, never
dropped.
"""

from __future__ import annotations

from typing import Callable

from ..record import classes_json
from ..reveal import RevealError, reveal
from ..summary import summarize
from ..targets.base import Target, TargetError


def reveal_runs(build: Callable[[], Target], runs: int, seed: int = 0, replay_samples: int = 32,
                progress: Callable[[int], None] | None = None) -> dict:
    """Reveal ``build()`` ``runs`` times (seed, seed + 1, ...), each target closed after its run.

    Returns:
        ``{"runs": N, "outcomes": [{"count", "tree", "summary", "classes"}...] (most frequent
        first; "classes" as a record's, None where every element uses one tree),
        "failed": [{"count", "error"}...], "deterministic": bool}`` (deterministic: every run
        was revealed and all gave one outcome).

    Raises:
        ValueError: runs < 1. TargetError from ``build()`` (the ranks cannot start) propagates.
    """
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    outcomes: dict = {}
    failed: dict = {}
    for i in range(runs):
        if progress:
            progress(i)
        target = build()
        try:
            res = reveal(target, seed=seed + i, replay_samples=replay_samples)
        except (RevealError, TargetError) as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            failed[line] = failed.get(line, 0) + 1
            continue
        finally:
            spec = target.spec()
            target.close()
        if res.classes:
            key = tuple((c["tree"], c["mask"].tobytes(), c["mask"].shape) for c in res.classes)
        else:
            key = (res.tree,)
        if key not in outcomes:
            outcomes[key] = {"count": 0, "tree": res.tree.to_json(),
                             "summary": summarize(res.tree, spec=spec),
                             "classes": classes_json(res.classes, spec=spec)
                             if res.classes else None}
        outcomes[key]["count"] += 1
    found = sorted(outcomes.values(), key=lambda o: -o["count"])
    return {"runs": runs, "outcomes": found,
            "failed": [{"count": c, "error": e} for e, c in failed.items()],
            "deterministic": not failed and len(found) == 1}

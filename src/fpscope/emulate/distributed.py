"""Emulated GEMMs on a Dask cluster: row bands of D computed on the workers.

``fpscope.emulate.matmul(..., client=Client(...))`` validates the operands here
(``vectorized.prepare``), then cuts D into row bands: band ``[r0, r1)`` of D depends only on
rows ``r0 .. r1 - 1`` of A, C and scale_a, and on all of B and scale_b. Each band is one Dask
task running the local code path (:func:`fpscope.emulate._prepared_rows`, the engine resolved
here), so the bits are those of a local run; the epilogue and the output dtype (with the
device's NaN patterns) are applied here after the gather, as in a local run.

Data movement: the row bands of A, C and scale_a are scattered once (one piece per band, spread
over the workers), B and scale_b broadcast once to every worker; no operand is sent per task.
Arrays travel as float32 where every float64 word survives the round trip bit for bit (values
of fp32 and narrower formats: half the bytes), else as float64.

Failures: each task is retried ``RETRIES`` times on an exception, and the scheduler reschedules
the tasks of a worker that dies (its ``allowed-failures``, then ``KilledWorker``). Scattered
data cannot be recomputed: the bands whose operands died with a worker are scattered again
from here and resubmitted (``RETRIES`` times per band; B is broadcast again only if no copy
is left). A band that still fails raises :class:`RuntimeError` and cancels the rest: a partial
D is never returned.

dask is imported here only, lazily; without it: ``pip install 'fpscope[dask]'``.
"""

from __future__ import annotations

import uuid

import numpy as np

__all__ = ["RETRIES", "check", "gemm_bands", "map_row_bands"]

#: retries of a band's task that raised (a lost worker is rescheduled by the scheduler itself)
RETRIES = 2
WAIT_FOR_WORKERS_S = 10  # how long a call waits for the first worker of an empty cluster


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ImportError("emulation on a Dask cluster needs dask.distributed: "
                          "pip install 'fpscope[dask]'") from None
    return distributed


def check(client, bands) -> None:
    """Checks the arguments of ``matmul(client=, bands=)``.

    Raises:
        ValueError: ``client`` is not a synchronous ``dask.distributed.Client``, or ``bands``
            is neither None nor a positive integer.
        ImportError: dask.distributed is missing.
    """
    dd = _distributed()
    if not isinstance(client, dd.Client) or client.asynchronous:
        raise ValueError(f"client must be a (synchronous) dask.distributed.Client, not "
                         f"{type(client).__name__}")
    if bands is not None and (isinstance(bands, bool) or not isinstance(bands, int)
                              or bands < 1):
        raise ValueError(f"bands must be a positive integer (or None), not {bands!r}")


def _pack(x):
    """x (float64 array or None) as float32 when that keeps every word, else as is."""
    if x is None:
        return None
    x = np.ascontiguousarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        narrow = x.astype(np.float32)
    if np.array_equal(narrow.astype(np.float64).view(np.uint64), x.view(np.uint64)):
        return narrow
    return x


def _unpack(x):
    return None if x is None else np.asarray(x, dtype=np.float64)  # widening is exact


def _call(fn, n_rows: int, *parts):
    """On a worker: ``fn`` on the unpacked band and shared operands (the first ``n_rows`` of
    ``parts`` are arrays or None, then the shared arrays, then plain arguments); its float64
    result packed."""
    return _pack(fn(*[_unpack(p) if i < n_rows else p for i, p in enumerate(parts)]))


def _broadcast(client, arrays) -> list:
    """Futures of ``arrays`` (None kept) packed and copied to every worker."""
    return [None if x is None else client.scatter(_pack(x), broadcast=True, hash=False)
            for x in arrays]


def _band_gemm(a, c, sa, b, sb, profile, engine, threads):
    """One band of :func:`gemm_bands`: float64 (r1 - r0, N)."""
    from . import _prepared_rows

    scales = None if sa is None else (sa, sb)
    return _prepared_rows(a, b, c, scales, profile, engine, threads)


def map_row_bands(client, fn, rows, shared=(), args=(), bands: int | None = None,
                  progress=None) -> np.ndarray:
    """``D[r0:r1] = fn(*[x[r0:r1] for x in rows], *shared, *args)`` for each row band, on the
    cluster's workers; the bands gathered into D in order.

    Args:
        client: a ``dask.distributed.Client`` (synchronous).
        fn: a picklable function returning a float64 (r1 - r0, N) array of the band's rows.
        rows: float64 arrays of M rows (or None: passed as None), cut into bands and
            scattered once.
        shared: float64 arrays (or None) every band takes whole, broadcast once to every
            worker.
        args: small picklable arguments sent with each task.
        bands: number of bands (None: twice the cluster's worker threads), at most M.
        progress: None, or ``progress(rows_done, M)`` after each band arrives.

    Returns:
        float64 (M, N).

    Raises:
        ValueError: ``client`` not a synchronous Client, bad ``bands``, or a cluster without
            workers (none joined within ``WAIT_FOR_WORKERS_S`` seconds).
        RuntimeError: a band failed after its retries, or its operands were lost with workers
            more than ``RETRIES`` times (rows and error named); the other bands are cancelled.
        ImportError: dask.distributed is missing.
    """
    dd = _distributed()
    check(client, bands)
    M = next(x.shape[0] for x in rows if x is not None)
    threads = sum(client.nthreads().values())
    if threads == 0:  # workers may still be joining: wait a little, then say so in one line
        try:
            client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
        except (TimeoutError, OSError):
            raise ValueError(f"the Dask cluster has no workers (none joined within "
                             f"{WAIT_FOR_WORKERS_S} s): start some") from None
        threads = sum(client.nthreads().values())
    if bands is None:
        bands = 2 * max(threads, 1)
    nb = max(1, min(bands, M))
    edges = [M * i // nb for i in range(nb + 1)]
    tag = uuid.uuid4().hex[:8]
    held = []  # every future of this call, released at the end
    try:
        pieces = [[_pack(x[r0:r1]) if x is not None else None for x in rows]
                  for r0, r1 in zip(edges, edges[1:])]
        flat = [p for band in pieces for p in band if p is not None]
        sent = iter(client.scatter(flat, hash=False)) if flat else iter(())
        band_refs = [[next(sent) if p is not None else None for p in band] for band in pieces]
        shared_refs = _broadcast(client, shared)
        held += [f for band in band_refs for f in band if f is not None]
        held += [f for f in shared_refs if f is not None]
        n_rows = len(rows) + len(shared)
        owner = {}  # task key -> band
        lost = [0] * nb  # times each band's data was lost with a worker
        pending = dd.as_completed()

        def submit(i: int, refs) -> None:
            fut = client.submit(_call, fn, n_rows, *refs, *shared_refs, *args,
                                key=f"fpscope-emulate-band-{tag}-{i}-{lost[i]}",
                                retries=RETRIES, pure=False)
            owner[fut.key] = i
            held.append(fut)
            pending.add(fut)

        for i, refs in enumerate(band_refs):
            submit(i, refs)
        D = None
        done = 0
        for fut in pending:
            i = owner[fut.key]
            r0, r1 = edges[i], edges[i + 1]
            if fut.status == "error":  # raised on every try (or killed workers: KilledWorker)
                exc = fut.exception()
                raise RuntimeError(f"rows {r0}..{r1 - 1} of D failed on the Dask cluster after "
                                   f"{RETRIES} retries: {type(exc).__name__}: {exc}") from exc
            if fut.status != "finished":  # its scattered operands died with a worker
                lost[i] += 1
                if lost[i] > RETRIES:
                    raise RuntimeError(f"rows {r0}..{r1 - 1} of D: their operands were lost "
                                       f"with a Dask worker {lost[i]} times")
                if any(f is not None and f.status != "finished" for f in shared_refs):
                    shared_refs = _broadcast(client, shared)
                    held += [f for f in shared_refs if f is not None]
                refs = [None if p is None else client.scatter(p, hash=False)
                        for p in pieces[i]]
                held += [f for f in refs if f is not None]
                submit(i, refs)
                continue
            part = _unpack(fut.result())
            if D is None:
                D = np.empty((M,) + part.shape[1:])
            D[r0:r1] = part
            done += r1 - r0
            if progress is not None:
                progress(done, M)
        return D
    finally:
        client.cancel(held)


def gemm_bands(client, A, B, C, scales, profile, engine: str, threads: int | None,
               bands: int | None, progress=None) -> np.ndarray:
    """One 2-D GEMM of ``fpscope.emulate.matmul(client=...)`` on the cluster.

    Args:
        client: a ``dask.distributed.Client``.
        A (M, K), B (K, N), C (M, N), scales (None or (SA (M, K / s), SB (K / s, N))): float64
            operands from ``vectorized.prepare``.
        profile: the :class:`fpscope.profile.Profile` (library level included).
        engine: "numba" or "numpy" (resolved by the caller for the whole GEMM).
        threads: numba threads per band (None: 1; the workers' threads run bands side by side).
        bands, progress: as :func:`map_row_bands`.

    Returns:
        float64 (M, N): the bits of ``fpscope.emulate._prepared_rows`` on the whole GEMM.

    Raises:
        as :func:`map_row_bands`.
    """
    SA, SB = (None, None) if scales is None else scales
    return map_row_bands(client, _band_gemm, (A, C, SA), (B, SB),
                         (profile, engine, threads or 1), bands, progress)

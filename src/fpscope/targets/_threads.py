"""BLAS thread limits for the lifetime of a target (threadpoolctl).

The number of threads can change a BLAS kernel's blocking and so its accumulation order; a target
created with ``threads=t`` holds the limit until ``close()``.
"""

from __future__ import annotations

from .base import TargetError


class BlasThreadLimit:
    """Limit every loaded BLAS library (OpenBLAS, MKL, BLIS, ...) to ``threads`` threads.

    ``threads=None`` changes nothing. :meth:`restore` puts the previous limits back and may be
    called more than once.

    Raises:
        TargetError: threadpoolctl is missing or refuses the limit.
    """

    def __init__(self, target: str, threads: int | None):
        self._limiter = None
        if threads is None:
            return
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            raise TargetError(
                f"{target}: threads needs threadpoolctl; pip install threadpoolctl"
            ) from None
        try:
            self._limiter = threadpool_limits(limits=int(threads), user_api="blas")
        except Exception as exc:
            raise TargetError(f"{target}: cannot limit BLAS threads: {exc}") from None

    def restore(self) -> None:
        """Undo the limit (idempotent)."""
        limiter, self._limiter = self._limiter, None
        if limiter is not None:
            limiter.restore_original_limits()

"""The child side of :class:`fpscope.targets.isolated.ChildTarget`, and the wire format both use.

Run as ``python -m fpscope.targets._child``: the process keeps its stdin and stdout for the
protocol, points file descriptor 1 (and ``sys.stdout``) at stderr so that whatever a library
prints cannot corrupt it, writes :data:`MAGIC`, then answers requests until a ``close`` request
or the end of its stdin. It builds one target with :func:`fpscope.targets.make_target` and
forwards the probe interface to it.

Wire format: a message is one or more frames, each an 8-byte little-endian length followed by
that many bytes. The first frame is a UTF-8 JSON object whose ``"arrays"`` entry says how many
frames follow; each of those is one array in ``.npy`` format (``numpy.save``, read back with
``numpy.load(allow_pickle=False)``). Nothing is pickled.

Requests (``"op"``): ``make`` (``name``, ``conditions``), ``evaluate``, ``evaluate_each`` (one
array X), ``evaluate_outer`` (P, Q), ``evaluate_products`` (A, B), ``spec``, ``close``. Replies
carry ``"calls"`` (the target's call count) and either ``"error"`` (a one-line message) or the
result: arrays for the evaluations, ``"describe"`` for ``make``, ``"spec"`` for ``spec``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import signal
import struct
import sys

import numpy as np

#: written by the child on its protocol stream once stdout is redirected; the parent discards
#: anything before it (output of an interpreter start-up hook, say).
MAGIC = b"\x00FPSCOPE-CHILD/1\n"

_LEN = struct.Struct("<Q")


class ProtocolEOF(EOFError):
    """The other end closed its stream (between or inside a message)."""


def _read_exactly(stream, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        k = stream.readinto(view[got:])
        if not k:
            raise ProtocolEOF(f"stream ended after {got} of {size} bytes")
        got += k
    return buf


#: .npy headers seen, as numpy.load parsed them: header bytes -> (dtype, shape); and headers
#: written: (dtype.str, shape) -> header bytes. Probes repeat a few shapes, so a round trip
#: spends no time on parsing or formatting headers (numpy.load/numpy.save do it once a shape).
_READ_HEADERS: dict[bytes, tuple[np.dtype, tuple[int, ...]]] = {}
_WRITE_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}
_CACHE_SIZE = 256


def _npy_parts(array: np.ndarray) -> list:
    """The ``.npy`` bytes of ``array`` (as numpy.save writes them), as a header and a buffer."""
    a = np.ascontiguousarray(array)
    key = (a.dtype.str, a.shape)
    head = _WRITE_HEADERS.get(key)
    if head is None:
        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        data = buf.getvalue()
        if a.dtype.hasobject or len(data) < a.nbytes:
            return [data]
        if len(_WRITE_HEADERS) >= _CACHE_SIZE:
            _WRITE_HEADERS.clear()
        _WRITE_HEADERS[key] = data[: len(data) - a.nbytes]
        return [data]
    return [head, memoryview(a).cast("B")] if a.nbytes else [head]


def _npy_load(buf: bytearray) -> np.ndarray:
    """The array in the ``.npy`` bytes ``buf`` (numpy.load with allow_pickle=False, which parses
    each distinct header once; the data is then read in place)."""
    start = None
    if buf[:6] == b"\x93NUMPY" and len(buf) >= 12:
        if buf[6] == 1:
            start = 10 + struct.unpack_from("<H", buf, 8)[0]
        elif buf[6] in (2, 3):
            start = 12 + struct.unpack_from("<I", buf, 8)[0]
    if start is not None:
        parsed = _READ_HEADERS.get(bytes(buf[:start]))
        if parsed is not None:
            dtype, shape = parsed
            if len(buf) - start == dtype.itemsize * math.prod(shape):
                return np.frombuffer(buf, dtype=dtype, offset=start).reshape(shape)
    array = np.load(io.BytesIO(buf), allow_pickle=False)
    if start is not None and array.flags.c_contiguous and not array.dtype.hasobject:
        if len(_READ_HEADERS) >= _CACHE_SIZE:
            _READ_HEADERS.clear()
        _READ_HEADERS[bytes(buf[:start])] = (array.dtype, array.shape)
    return array


def send(stream, header: dict, arrays=()) -> None:
    """Write one message: the JSON ``header`` (its ``"arrays"`` entry is set here) and
    ``arrays`` as ``.npy`` frames; flushes the stream."""
    blobs = [_npy_parts(a) for a in arrays]
    head = json.dumps({**header, "arrays": len(blobs)}, separators=(",", ":")).encode()
    parts = [_LEN.pack(len(head)), head]
    for blob in blobs:
        parts.append(_LEN.pack(sum(len(p) for p in blob)))
        parts += blob
    for part in parts:
        stream.write(part)
    stream.flush()


def receive(stream) -> tuple[dict, list[np.ndarray]]:
    """Read one message; returns (header, arrays) (arrays writable, C order).

    Raises:
        ProtocolEOF: the stream ended.
        ValueError: the message is malformed.
    """
    (size,) = _LEN.unpack(_read_exactly(stream, _LEN.size))
    header = json.loads(_read_exactly(stream, size))
    if not isinstance(header, dict):
        raise ValueError("message header is not a JSON object")
    arrays = []
    for _ in range(int(header.get("arrays", 0))):
        (size,) = _LEN.unpack(_read_exactly(stream, _LEN.size))
        arrays.append(_npy_load(_read_exactly(stream, size)))
    return header, arrays


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` in one line: a TargetError's message as it is, anything else
    prefixed with its type name."""
    from .base import TargetError

    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    if isinstance(exc, TargetError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _format(fmt) -> dict:
    return dataclasses.asdict(fmt)


def describe(target) -> dict:
    """The attributes a ChildTarget mirrors (JSON-able)."""
    shape = getattr(target, "shape", None)
    return {
        "name": target.name,
        "n": int(target.n),
        "in_format": _format(target.in_format),
        "out_format": _format(target.out_format),
        "is_matrix": bool(target.is_matrix),
        "has_products": bool(target.has_products),
        "max_rows": int(target.max_rows),
        "max_cols": int(target.max_cols),
        "shape": None if shape is None else [int(s) for s in shape],
        "spec": target.spec(),
        "blas": _blas_kernels(),
    }


def _blas_kernels() -> list:
    """The BLAS libraries loaded in this process and the kernels they chose (threadpoolctl's
    ``internal_api`` and ``architecture``; [] without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{"internal_api": i.get("internal_api"), "architecture": i.get("architecture")}
            for i in threadpool_info() if i.get("user_api") == "blas"]


def _serve(target, header: dict, arrays: list[np.ndarray]):
    """(reply header, reply arrays, target) for one request."""
    op = header.get("op")
    if op == "make":
        from . import make_target

        if target is not None:
            raise RuntimeError("the child already holds a target")
        cond = dict(header.get("conditions") or {})
        if cond.get("shape") is not None:
            cond["shape"] = tuple(cond["shape"])
        target = make_target(header["name"], **cond)
        return {"describe": describe(target)}, [], target
    if target is None:
        raise RuntimeError(f"request {op!r} before the target was made")
    if op in ("evaluate", "evaluate_each"):
        return {}, [getattr(target, op)(arrays[0])], target
    if op in ("evaluate_outer", "evaluate_products"):
        return {}, [getattr(target, op)(arrays[0], arrays[1])], target
    if op == "spec":
        return {"spec": target.spec()}, [], target
    raise ValueError(f"unknown request {op!r}")


def main() -> int:
    """Serve requests on the original stdin/stdout until ``close`` or end of input."""
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # nothing else reads the protocol stream
    os.close(null)
    os.dup2(2, 1)  # C libraries that print write to stderr now
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull)  # noqa: SIM115
    # the parent owns this process's lifetime: Ctrl-C in a terminal interrupts the parent, which
    # then closes the child; the child ends by itself when its stdin ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto_out.write(MAGIC)
    proto_out.flush()

    target = None
    try:
        while True:
            try:
                header, arrays = receive(proto_in)
            except ProtocolEOF:
                return 0
            if header.get("op") == "close":
                if target is not None:
                    t, target = target, None
                    try:
                        t.close()
                    except Exception as exc:
                        send(proto_out, {"error": one_line(exc), "calls": t.calls})
                        return 0
                    send(proto_out, {"calls": t.calls})
                else:
                    send(proto_out, {"calls": 0})
                return 0
            try:
                reply, out, target = _serve(target, header, arrays)
            except Exception as exc:
                reply, out = {"error": one_line(exc)}, []
            reply["calls"] = 0 if target is None else int(target.calls)
            try:
                send(proto_out, reply, out)
            except (TypeError, ValueError) as exc:  # a spec that is not JSON, say
                send(proto_out, {"error": one_line(exc), "calls": reply["calls"]})
    except (BrokenPipeError, ProtocolEOF):
        return 0
    finally:
        if target is not None:
            target.close()


if __name__ == "__main__":
    sys.exit(main())

"""``ms.distributed``: batch inference on a Dask cluster — functions shipped as MS-BC, batches by shape class.

Why Dask and not a scheduler of our own: users already run it (from a notebook, with a dashboard, from a
``LocalCluster`` to Kubernetes or SLURM), and it already recomputes what a dead worker held. msvm adds
what Dask cannot know: a jitted function travels as its verified bytecode (``frontend.persist``), once
per worker, as one task every batch depends on (recomputable from its payload, unlike scattered data);
each signature the batches need is compiled before it ships, so no worker meets one it lacks; and
batches of one shape class go to one worker, so each worker's JIT sees few distinct cache keys and a key
is compiled once, not once per worker. Where workers share ``MSVM_JIT_CACHE_DIR``, a worker that gets a
key hot after another compiled it loads the code from disk instead (and interprets meanwhile: nobody
waits for another's compile).

A batch that fails with an error of its own (a wrong shape or dtype) does not fail the map's other
batches and is not retried: the worker returns the error as data, and the map raises an ``MsvmError``
naming the batch's index and the original error (``return_exceptions=True``: that error in its place).

Importing this module imports dask; ``import msvm`` does not (``ms.distributed`` is imported on first
use). The Jupyter views (``msvm_widgets.ClusterJITView``) read ``cluster_jit_info``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

try:
    import dask
    import dask.array as da
    import distributed
except ImportError as exc:  # pragma: no cover - exercised only where dask is missing
    raise ImportError("ms.distributed needs Dask: pip install 'msvm[dask]'") from exc

from . import vm
from .errors import MsvmError
from .frontend.jitfunction import JitFunction
from .frontend.persist import receive, ship

_BATCH_ERRORS = (MsvmError, TypeError, ValueError)  # what a bad batch raises: its own problem, not retried
_default: dict[str, Any] = {}  # the LocalCluster and Client that client=None started, kept for later maps
_default_lock = threading.Lock()


class _Failed:
    """A batch's own error as plain data (exceptions do not survive pickling with their fields)."""

    def __init__(self, exc: BaseException) -> None:
        self.kind = type(exc).__name__
        self.code = getattr(exc, "code", None)
        self.message = getattr(exc, "message", None) or str(exc)
        self.hint = getattr(exc, "hint", None)
        self.address = getattr(exc, "address", None)

    def error(self, index: int, total: int) -> MsvmError:
        what = f"{self.kind} [{self.code}]" if self.code else self.kind
        return MsvmError(f"batch {index} of {total} failed: {what}: {self.message}",
                         code=self.code, address=self.address, hint=self.hint)


def _run_batch(fn: Any, args: tuple) -> Any:
    try:
        return fn(*args)
    except _BATCH_ERRORS as exc:
        return _Failed(exc)


def default_client() -> distributed.Client:
    """The client of a ``LocalCluster`` sized to this machine (one single-threaded worker per core: msvm's
    kernels bring their own threads), started at the first map that names no client."""
    with _default_lock:
        client = _default.get("client")
        if client is None or client.status in ("closing", "closed"):
            cluster = distributed.LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1,
                                               processes=True)
            client = distributed.Client(cluster)
            _default.update(cluster=cluster, client=client)
        return client


def _shippable(fn: Any) -> None:
    from .onnx.model import OnnxModel

    if not isinstance(fn, (JitFunction, OnnxModel)):
        raise TypeError(f"ms.distributed maps an @ms.jit function or an ONNX model, got {type(fn).__name__}")


def _shipped(client: distributed.Client, fn: Any) -> distributed.Future:
    """The function as one task every batch depends on: each worker receives (and verifies) it once, and
    a worker that dies with it is no loss — the task is recomputed from its payload."""
    payload = ship(fn)
    key = f"msvm-function-{hashlib.sha256(payload).hexdigest()[:24]}"
    return client.submit(receive, payload, key=key, pure=True)


def _split(batches: Any, batch_size: int | None) -> list[tuple]:
    """The map's batches as argument tuples (a tuple batch spreads over the parameters)."""
    if batch_size is None:
        return [b if isinstance(b, tuple) else (b,) for b in batches]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    arrays = tuple(np.asarray(a) for a in (batches if isinstance(batches, tuple) else (batches,)))
    rows = {len(a) for a in arrays}
    if len(rows) != 1:
        raise ValueError(f"with batch_size, every array is split along axis 0 and needs as many rows; got "
                         f"{sorted(rows)}")
    (n,) = rows
    return [tuple(a[i:i + batch_size] for a in arrays) for i in range(0, n, batch_size)]


def shape_class(args: tuple) -> tuple:
    """What a batch's cache keys depend on: each argument's shape and dtype (or its Python value)."""
    return tuple((np.shape(a), np.asarray(a).dtype.str) if hasattr(a, "shape") or isinstance(a, list)
                 else (type(a).__name__, repr(a)) for a in args)


def _prepare(fn: Any, calls: list[tuple]) -> None:
    """Compile, here, each signature the batches need: the shipped function serves exactly those."""
    if not isinstance(fn, JitFunction):
        return  # an ONNX model has one version for every shape
    for args in {shape_class(a): a for a in calls}.values():
        with contextlib.suppress(_BATCH_ERRORS):  # a bad batch: the worker reports it, with its index
            fn.program_for(*args)


def _assign(classes: list[tuple], workers: Sequence[str]) -> list[str | None]:
    """A preferred worker per batch: whole shape classes, the largest first, to the least loaded worker."""
    if len(workers) < 2:
        return [None] * len(classes)
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(classes):
        groups.setdefault(c, []).append(i)
    load = dict.fromkeys(workers, 0)
    chosen: list[str | None] = [None] * len(classes)
    for members in sorted(groups.values(), key=len, reverse=True):
        worker = min(load, key=load.__getitem__)
        load[worker] += len(members)
        for i in members:
            chosen[i] = worker
    return chosen


def _show_progress(futures: list[distributed.Future]) -> None:
    """Dask's progress bar: text on a terminal (until done), its widget in a Jupyter kernel."""
    from distributed.utils import is_kernel

    distributed.progress(futures, notebook=is_kernel(), multi=False)


def map_batches(fn: Any, batches: Iterable[Any], client: distributed.Client | None = None, *,
                batch_size: int | None = None, retries: int = 2, progress: bool = True,
                return_exceptions: bool = False) -> list[Any]:
    """``[fn(*b) for b in batches]`` on a Dask cluster, in input order.

    ``fn``: an ``@ms.jit`` function or ONNX model; a batch is an array (or a tuple of arguments). With
    ``batch_size``, ``batches`` is one array (or a tuple of arrays) split along axis 0 into batches of
    that many rows. ``client=None`` uses a ``LocalCluster`` sized to the machine (``default_client``).
    ``retries``: how often a batch whose task failed for another reason than its own error is run again
    (a worker that dies is not a failure: Dask recomputes what it held). A batch's own error raises an
    ``MsvmError`` naming its index, or with ``return_exceptions=True`` takes its place in the result.
    """
    _shippable(fn)
    calls = _split(batches, batch_size)
    if not calls:
        return []
    client = client or default_client()
    _prepare(fn, calls)
    shipped = _shipped(client, fn)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    prefer = _assign([shape_class(a) for a in calls], workers)
    run = uuid.uuid4().hex[:12]  # this map's tasks: a batch's key needs no digest of its data
    futures = [client.submit(_run_batch, shipped, args, key=f"msvm-batch-{run}-{i}",
                             workers=None if w is None else [w], allow_other_workers=w is not None,
                             retries=retries, pure=False)
               for i, (args, w) in enumerate(zip(calls, prefer))]
    if progress:
        _show_progress(futures)
    distributed.wait(futures)
    results: list[Any] = []
    for i, future in enumerate(futures):
        if future.status == "error":
            exc = future.exception()
            result: Any = MsvmError(f"batch {i} of {len(calls)} failed after {retries} retries: "
                                    f"{type(exc).__name__}: {exc}")
        else:
            result = future.result()
            if isinstance(result, _Failed):
                result = result.error(i, len(calls))
        if isinstance(result, MsvmError) and not return_exceptions:
            raise result
        results.append(result)
    return results


def _apply_block(block: np.ndarray, fn: Any) -> Any:
    return fn(block)


def map_blocks(fn: Any, array: da.Array) -> da.Array:
    """``fn`` over each chunk of ``array`` along axis 0 (the batch axis), lazily: a dask array.

    ``fn`` maps a batch of rows to a batch of as many rows (one array); the other axes are one chunk each.
    Its output's dtype and trailing shape come from a call on one row of zeros here.
    """
    _shippable(fn)
    if not isinstance(array, da.Array):
        raise TypeError(f"map_blocks takes a dask array, got {type(array).__name__}")
    if array.ndim == 0:
        raise ValueError("map_blocks needs an array with a batch axis (axis 0)")
    array = array.rechunk({axis: -1 for axis in range(1, array.ndim)})
    probe = fn(np.zeros((1, *array.shape[1:]), array.dtype))
    if not isinstance(probe, np.ndarray) or probe.ndim == 0 or probe.shape[0] != 1:
        raise TypeError(f"map_blocks needs a function that returns one array with a row per input row; "
                        f"{getattr(fn, '__name__', fn)} returned {type(probe).__name__} for one row")
    token = hashlib.sha256(ship(fn)).hexdigest()[:24]
    function = dask.delayed(receive, pure=True)(ship(fn), dask_key_name=f"msvm-function-{token}")
    chunks = (array.chunks[0], *((d,) for d in probe.shape[1:]))
    extra = {}
    if probe.ndim < array.ndim:
        extra["drop_axis"] = list(range(probe.ndim, array.ndim))
    elif probe.ndim > array.ndim:
        extra["new_axis"] = list(range(array.ndim, probe.ndim))
    return da.map_blocks(_apply_block, array, function, chunks=chunks, meta=probe[:0],
                         name=f"msvm-{getattr(fn, '__name__', 'fn')}", **extra)


def cluster_jit_info(client: distributed.Client | None = None) -> dict[str, list[dict[str, Any]]]:
    """``{worker address: ms.vm.jit_info() there}`` for every worker of the cluster."""
    return (client or default_client()).run(vm.jit_info)


def summary(entries: list[dict[str, Any]]) -> dict[str, int]:
    """One worker's JIT in four figures: cache entries, native hits, compiles, loads from the disk cache."""
    return {"entries": len(entries), "hits": sum(e.get("hits", 0) for e in entries),
            "compiles": sum(1 for e in entries
                            if e.get("source") == "compiled" and e.get("status") == "compiled"),
            "disk_loads": sum(1 for e in entries if e.get("source") == "disk")}


__all__ = ["cluster_jit_info", "default_client", "map_batches", "map_blocks", "shape_class", "summary"]

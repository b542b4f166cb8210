"""The distributed suite: W1's CNN over a data set of images through ``ms.distributed`` against one process.

2,000 images (W1's 3×64×64, seeded) in batches of varying size (``SIZES`` cycled) go through the same
``@ms.jit`` CNN three ways, each in a fresh Python process of its own (``python -m bench.distributed
--child SPEC``, one JSON line back) with a fresh, empty ``MSVM_JIT_CACHE_DIR`` its workers share:

- **one process**: ``[cnn(b) for b in batches]``, the loop a user would write without Dask;
- **dask, 1 worker** and **dask, 2 workers**: ``ms.distributed.map_batches`` on a ``LocalCluster``
  (processes, one thread a worker), started before the clock (its start is shown apart).

Each child runs the data set twice: *cold* (a fresh function and JIT: what a first run costs, compiles
and disk loads included) and *warm* (the same batches again, once the compiles the cold pass started
have landed). The table has, per configuration, medians over rounds: images per second cold and warm,
compiles and disk-cache loads per worker (``ms.distributed.summary`` of ``cluster_jit_info``: each
worker's own JIT), and the overhead per batch that Dask adds — a third 1-worker map's time less the
same loop's run inside that worker (a task of its own), over the batches: one worker runs the batches
one after another, as the loop does, in the same process with the same JIT state, so what is left is
shipping, scheduling and the results coming back. (The one-process loop is not that reference: Dask's
workers run with one BLAS/OpenMP thread, the loop's kernels with every core.) Every configuration's
outputs are checked against the one-process loop's.

Run: ``python -m bench distributed`` or ``python -m bench.distributed [--rounds N] [--images N]
[--quick]``. Needs ``msvm[dask]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from . import harness
from .harness import fmt_time, table

CONFIGS = (("one process", 0), ("dask, 1 worker", 1), ("dask, 2 workers", 2))  # (label, workers; 0: no Dask)
SIZES = (1, 4, 8, 16, 32, 12, 2, 24)  # batch sizes, cycled over the data set: eight shape classes
IMAGES, QUICK_IMAGES = 2000, 200
ROUNDS, QUICK_ROUNDS = 3, 1
SIDE = 64  # W1's images: 3×64×64
CHILD_TIMEOUT_S = 900.0
CHECK_RTOL = 1e-3  # outputs against the one-process loop's (float32 sums over a data set)


def batch_sizes(images: int, sizes: tuple[int, ...] = SIZES) -> list[int]:
    """``sizes`` cycled until they cover ``images`` (the last one cut to fit)."""
    out: list[int] = []
    while sum(out) < images:
        out.append(min(sizes[len(out) % len(sizes)], images - sum(out)))
    return out


def data_set(images: int, side: int = SIDE) -> list[Any]:
    """The seeded images in their batches (every child makes the same ones)."""
    import numpy as np

    rng = np.random.default_rng(7)
    return [rng.standard_normal((n, 3, side, side)).astype(np.float32) for n in batch_sizes(images)]


def checksum(outputs: list[Any]) -> float:
    """What the configurations' outputs are compared by: the sum of their magnitudes, in float64."""
    import numpy as np

    return float(sum(np.abs(np.asarray(o, dtype=np.float64)).sum() for o in outputs))


def timed_loop(fn: Any, batches: list[Any]) -> float:
    """Seconds of ``[fn(b) for b in batches]`` where it runs (in a worker: no Dask in between)."""
    t0 = time.perf_counter()
    for b in batches:
        fn(b)
    return time.perf_counter() - t0


# -- the child: one configuration in a fresh process, one JSON line ---------------------------------------
def child_run(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec``: workers (0: the loop in this process), images, side. The cold and warm passes' seconds,
    each worker's JIT summary, the cluster's start and the outputs' checksum."""
    import msvm as ms

    from .models import cnn_params, make_cnn

    batches = data_set(int(spec["images"]), int(spec.get("side", SIDE)))
    cnn = make_cnn(cnn_params())
    workers = int(spec["workers"])
    result: dict[str, Any] = {"batches": len(batches)}
    if workers == 0:
        run = lambda: [cnn(b) for b in batches]  # noqa: E731
        info = lambda: {"this process": ms.vm.jit_info()}  # noqa: E731
        settle = lambda: ms.vm.wait_for_compiles(CHILD_TIMEOUT_S)  # noqa: E731
        close = lambda: None  # noqa: E731
    else:
        import distributed

        t0 = time.perf_counter()
        cluster = distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                           dashboard_address=None, silence_logs=50)
        client = distributed.Client(cluster)
        client.wait_for_workers(workers)
        result["cluster_start_s"] = time.perf_counter() - t0
        run = lambda: ms.distributed.map_batches(cnn, batches, client, progress=False)  # noqa: E731
        info = lambda: ms.distributed.cluster_jit_info(client)  # noqa: E731
        settle = lambda: client.run(ms.vm.wait_for_compiles, CHILD_TIMEOUT_S)  # noqa: E731

        def close() -> None:
            client.close()
            cluster.close()

    try:
        for name in ("cold", "warm"):
            t0 = time.perf_counter()
            outputs = run()
            result[f"{name}_s"] = time.perf_counter() - t0
            settle()  # the compiles a pass started land before the next one
        if workers == 1:  # the overhead: a map against the same loop inside its worker, both settled
            result["in_worker_s"] = client.submit(timed_loop, cnn, batches, pure=False).result()
            t0 = time.perf_counter()
            run()
            result["again_s"] = time.perf_counter() - t0
        result["workers"] = [ms.distributed.summary(entries) for _, entries in sorted(info().items())]
    finally:
        close()
    result["checksum"] = checksum(outputs)
    return result


def child_main(spec_json: str) -> int:
    return harness.child_main(spec_json, child_run)


def run_child(spec: dict[str, Any], cache_dir: str, timeout_s: float = CHILD_TIMEOUT_S) -> dict[str, Any]:
    """One child in a fresh process with the persistent code cache on in ``cache_dir`` (its workers
    inherit it: one folder for the cluster); its JSON result, or ``{"error": ...}``."""
    return harness.run_child("distributed", spec, timeout_s,
                             {"MSVM_JIT_CACHE": "1", "MSVM_JIT_CACHE_DIR": cache_dir})


# -- the parent: rounds of fresh children, one table ------------------------------------------------------
def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rate(images: int, seconds: float | None) -> str:
    return "-" if not seconds else f"{images / seconds:,.0f}/s ({fmt_time(seconds)})"


def _per_worker(results: list[dict[str, Any]], key: str) -> str:
    """Each worker's median count over the rounds, workers in address order."""
    n = max(len(r["workers"]) for r in results)
    return " / ".join(f"{_med([r['workers'][i][key] for r in results if i < len(r['workers'])]):g}"
                      for i in range(n))


def bench(images: int, rounds: int, side: int = SIDE) -> tuple[str, list[str]]:
    """The table (medians over ``rounds`` fresh children a configuration, taken in turns) and the
    children that failed."""
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in CONFIGS}
    failed: list[str] = []
    for r in range(rounds):
        for label, workers in CONFIGS:
            folder = tempfile.mkdtemp(prefix="msvm-distributed-jit-")
            try:
                res = run_child({"workers": workers, "images": images, "side": side}, folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            if "error" in res:
                failed.append(f"{label}, round {r + 1}: {res['error'].splitlines()[0][:300]}")
            else:
                results[label].append(res)
    local = results[CONFIGS[0][0]]
    reference = _med([r["checksum"] for r in local])
    rows = []
    for label, workers in CONFIGS:
        ok = results[label]
        if not ok:
            rows.append([label, f"0/{rounds}"] + ["-"] * 7)
            continue
        batches = ok[0]["batches"]
        overhead = "-"
        if workers == 1:
            per_batch = _med([(r["again_s"] - r["in_worker_s"]) / batches for r in ok])
            overhead = fmt_time(per_batch) if per_batch > 0 else f"-{fmt_time(-per_batch)}"
        same = reference is not None and all(
            abs(r["checksum"] - reference) <= CHECK_RTOL * abs(reference) for r in ok)
        rows.append([label, f"{len(ok)}/{rounds}",
                     fmt_time(_med([r["cluster_start_s"] for r in ok])) if workers else "-",
                     _rate(images, _med([r["cold_s"] for r in ok])),
                     _rate(images, _med([r["warm_s"] for r in ok])),
                     _per_worker(ok, "compiles"), _per_worker(ok, "disk_loads"), overhead,
                     "yes" if same else ("no" if reference is not None else "-")])
    header = ["configuration", "rounds", "cluster start", "cold: images/s (time)", "warm: images/s (time)",
              "compiles per worker", "disk loads per worker", "Dask overhead per batch",
              "outputs = one process"]
    title = (f"W1 CNN over {images} images (3×{side}×{side}) in {len(batch_sizes(images))} batches of "
             f"sizes {'/'.join(map(str, SIZES))}, fresh processes, medians of {rounds} round(s)")
    notes = ("\ncold: the first pass of a fresh process and JIT (compiles, disk loads, function shipping "
             "included); warm: the same batches again once the compiles it started have landed. Per "
             "worker: medians over rounds, workers in address order. Dask overhead per batch: a third "
             "1-worker map less the same loop run inside that worker, over the batches (Dask's workers run "
             "with OMP/MKL/OPENBLAS_NUM_THREADS=1, so the one-process loop, whose kernels use every core, "
             "is not its reference). The cluster's start is not in the passes' times. A map sends each shape "
             "class to one worker, so the workers' compiles add up to about the one process's; disk loads "
             "count keys a worker met after another compiled them (a batch stolen or recomputed).")
    return table(title, header, rows) + notes, failed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.distributed", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"fresh processes per figure (default {ROUNDS})")
    parser.add_argument("--images", type=int, default=None, help=f"images in the data set (default {IMAGES})")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ROUNDS} round, {QUICK_IMAGES} images")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # a child's spec, JSON
    args = parser.parse_args(argv or [])
    if args.child is not None:
        sys.exit(child_main(args.child))
    if importlib.util.find_spec("distributed") is None:
        print("dask.distributed is not installed (pip install 'msvm[dask]'): nothing to run")
        return
    images = args.images or (QUICK_IMAGES if args.quick else IMAGES)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    print(f"Distributed: ms.distributed.map_batches on a LocalCluster against the same loop in one process "
          f"({os.cpu_count()} cores here; a worker is a process with one thread, msvm's kernels bring "
          f"their own)" + (" — QUICK run: fewer images, one round" if args.quick else ""))
    out, failed = bench(images, rounds)
    print(out)
    for line in failed:
        print(f"failed: {line}")


if __name__ == "__main__":
    main(sys.argv[1:])

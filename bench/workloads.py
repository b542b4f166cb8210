"""The MS-JIT benchmark suite: workloads W1–W6 whose input shapes change at run time.

Engines measured in the same run: numpy eager (the reference; every engine's output is checked
against it), the msvm interpreter (JIT off), msvm with the JIT in each relevant cache mode, and
torch eager / torch.compile when torch is installed (jax.jit when jax is). Per workload: steady
state median (sampled in turns over the engines once all have run: ``measure_steady``) — taken AFTER
waiting for compiles (``ms.vm.wait_for_compiles``) in a process whose compile worker is warm, so it is
the best a long-running program reaches, not what a loop that never waits sees in a fresh process
(``python -m bench delivery`` measures that) — the first
call after each new shape, the whole stream's wall time with every compile included (the median of
``STREAM_ROUNDS`` runs from a fresh function and an empty cache, taken in turns: ``measure_streams``),
compiles, cache entries and hit rate, how long a loop on the steady input runs
before its first native call (the JIT engines), and GFLOP/s or GB/s against the sgemm
peak and memory bandwidth this suite measures on the machine — around each workload: the better of
the measurements just before and just after it, since on a shared machine both drift by 20–40 %
within a run and a figure from minutes earlier would credit or blame the engines for the drift.

Run: ``python -m bench workloads`` (options: ``python -m bench.workloads --help``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import msvm as ms

from .harness import calibrate_first, fmt_ratio, fmt_time, measure, optional_import, table
from .models import Workload, workloads

BUCKETS = (1, 4, 16, 64, 256, 1024)
SWITCH_PASSES = 3
STEADY_ROUNDS, STEADY_SAMPLE_S = 9, 0.1  # steady medians: rounds over every engine, one sample each
STREAM_ROUNDS = 5  # stream totals: the median of this many runs of the whole stream per engine (3 left
# W3's engines, a few percent apart, in a different order run to run on this drifting machine)
SETTLE_S = 0.2  # before each engine's sample: the last engine's BLAS/OpenMP threads stop spinning
LANDING_LIMIT_S = 10.0  # how long measure_landing waits for a first native call


@dataclass
class Run:
    engine: str
    steady: float | None = None
    stream_total: float | None = None  # the median of stream_totals
    stream_totals: list[float] = field(default_factory=list)
    call_times: list[float] = field(default_factory=list)
    first_calls: dict[tuple, float] = field(default_factory=dict)  # shape → first-call latency
    compiles: int | None = None
    entries: int | None = None
    hit_rate: float | None = None
    compile_ms: list[float] = field(default_factory=list)
    compile_cpu_ms: list[float] = field(default_factory=list)
    error: str | None = None
    max_abs_err: float | None = None
    also_steady: dict[str, float] = field(default_factory=dict)  # label -> steady seconds
    switch_ratios: list[float] = field(default_factory=list)  # stream again, warm: call ÷ same input's next
    switch_steady_ratios: list[float] = field(default_factory=list)  # the same calls ÷ their shape's steady
    landing: tuple[float, int] | None = None  # a fresh loop on the steady input: (s, calls) to a native run
    probes: dict[str, Callable[[], Any]] = field(default_factory=dict, repr=False)  # "steady"/label -> a call
    rewarm: Callable[[], None] | None = field(default=None, repr=False)  # compile the probes' keys again
    restream: Callable[[], float] | None = field(default=None, repr=False)  # the stream afresh: its total


def machine_peaks() -> tuple[float, float]:
    """(sgemm GFLOP/s, memory bandwidth GB/s) measured now, on this machine, with numpy."""
    a = np.random.default_rng(0).random((2048, 2048), dtype=np.float32)
    b = a.copy()
    t = min(measure(lambda: a @ b, repeat=3, min_time=0.2) for _ in range(2))
    gflops = 2 * 2048**3 / t / 1e9
    src = np.ones(32 << 20, np.float32)  # 128 MB: well beyond the caches
    dst = np.empty_like(src)
    t = measure(lambda: np.copyto(dst, src), repeat=5, min_time=0.2)
    return gflops, 2 * src.nbytes / t / 1e9


def _key(args: tuple[np.ndarray, ...]) -> tuple:
    return tuple(a.shape for a in args)


def run_stream(engine: str, fn: Callable[..., Any], w: Workload, convert=lambda a: a) -> Run:
    run = Run(engine)
    stream = [tuple(convert(a) for a in args) for args in w.stream]
    t_start = time.perf_counter()
    for raw, args in zip(w.stream, stream):
        t0 = time.perf_counter()
        fn(*args)
        dt = time.perf_counter() - t0
        run.call_times.append(dt)
        run.first_calls.setdefault(_key(raw), dt)
    run.stream_total = time.perf_counter() - t_start
    run.stream_totals.append(run.stream_total)
    return run


def measure_switches(run: Run, w: Workload, fn: Callable[..., Any], convert=lambda a: a) -> None:
    """Do later shape switches run at steady speed (W4: no thrash between two specialisations)? Once
    every shape of the stream is warm — compiled, where the JIT is on — the stream runs again
    (``SWITCH_PASSES`` times), each call followed at once by a second call on the same input; a call's
    ratio (the median over the passes) is its time over that second call's (``switch_ratios``), and
    over its shape's steady median measured before the passes (``switch_steady_ratios``). Why the
    pair: the machine drifts by 10–30 % within seconds, and a ratio to a median taken a second earlier
    measured the drift too — in five full runs 0.85–0.99 for the interpreter and 0.92–1.27 for the
    JIT, whose 1.13–1.27 (four runs of ten) no same-moment comparison reproduced (0.94–1.04, alone or
    in one process)."""
    if not w.switches:
        return
    inputs = [tuple(convert(a) for a in raw) for raw in w.stream]
    steady = {}
    for raw, args in zip(w.stream, inputs):
        if _key(raw) not in steady:
            steady[_key(raw)] = measure(lambda a=args: fn(*a), repeat=5, min_time=0.1)
    paired: list[list[float]] = []
    against_steady: list[list[float]] = []
    for _ in range(SWITCH_PASSES):
        paired.append([])
        against_steady.append([])
        for raw, args in zip(w.stream, inputs):
            t0 = time.perf_counter()
            fn(*args)
            t1 = time.perf_counter()
            fn(*args)
            t2 = time.perf_counter()
            paired[-1].append((t1 - t0) / (t2 - t1))
            against_steady[-1].append((t1 - t0) / steady[_key(raw)])
    run.switch_ratios = [statistics.median(call) for call in zip(*paired)]
    run.switch_steady_ratios = [statistics.median(call) for call in zip(*against_steady)]


def _jit_stats(run: Run, fname: str) -> None:
    entries = [e for e in ms.vm.jit_info() if e["function"] == fname]
    run.entries = len(entries)
    run.compiles = sum(1 for e in entries if e["status"] in ("compiled", "fallback"))
    run.compile_ms = [e["compile_ms"] for e in entries if e.get("compile_ms")]
    run.compile_cpu_ms = [e["compile_cpu_ms"] for e in entries if e.get("compile_cpu_ms")]
    run.hit_rate = ms.vm.get_jit_hit_rate()  # the cache was reset before this engine ran


def fresh_stream(w: Workload, options: dict[str, Any]) -> tuple[Callable[..., Any], Run]:
    """The stream through a new function, with the JIT cache emptied: every compile is this run's."""
    ms.vm.reset()
    ms.vm.wait_for_compiles(120)  # a compile left in flight by the engine before: not this stream's cost
    fn = w.make(**options)
    return fn, run_stream("", fn, w)


def bench_msvm(w: Workload, engine: str, options: dict[str, Any], reference: np.ndarray) -> Run:
    fn, run = fresh_stream(w, options)
    run.engine = engine
    run.restream = lambda: fresh_stream(w, options)[1].stream_total
    jit = "hot_threshold" not in options
    if jit:  # let queued compiles land, then warm the steady key
        ms.vm.wait_for_compiles(120)
        for _ in range(4):
            fn(*w.steady)
        ms.vm.wait_for_compiles(120)
        _jit_stats(run, fn.__name__)
    out = fn(*w.steady)
    run.max_abs_err = float(np.max(np.abs(np.asarray(out) - reference)))
    run.probes = probes(fn, w)
    measure_switches(run, w, fn)
    if jit:
        run.rewarm = lambda: warm(run.probes)
        run.landing = measure_landing(w, options)
    return run


def probes(fn: Callable[..., Any], w: Workload, convert=lambda a: a) -> dict[str, Callable[[], Any]]:
    """One call of ``fn`` on the steady input, and on each of the workload's other steady inputs."""
    inputs = {"steady": w.steady, **dict(w.also_steady)}
    converted = {label: tuple(convert(x) for x in args) for label, args in inputs.items()}
    return {label: (lambda a=args: fn(*a)) for label, args in converted.items()}


def warm(calls: dict[str, Callable[[], Any]]) -> None:
    """Make every probe's key hot and let its compile land (a later engine's ``ms.vm.reset()`` dropped
    it): steady state is native code where the JIT is on."""
    for call in calls.values():
        for _ in range(4):
            call()
    ms.vm.wait_for_compiles(120)
    for call in calls.values():
        call()


def measure_steady(runs: list[Run]) -> None:
    """Steady medians of every engine, sampled in turns: ``STEADY_ROUNDS`` rounds, each taking one
    sample of every engine's every probe. On a shared machine a slow spell then costs every engine
    a sample or two, where measuring one engine after another would hand the whole spell to one of
    them (same-run A/Bs here drift 20–30 % over seconds). Each sample starts ``SETTLE_S`` after the
    one before: OpenBLAS's and OpenMP's threads spin on for a while after a call (about 0.1 s), and
    the next engine's sample would share the cores with them (W1's interpreter: 22.5 against 15.4 ms
    sampled right after numpy)."""
    for run in runs:
        if run.rewarm is not None:
            run.rewarm()
    samples: dict[tuple[int, str], list[float]] = {}
    for _ in range(STEADY_ROUNDS):
        for i, run in enumerate(runs):
            for label, call in run.probes.items():
                time.sleep(SETTLE_S)
                samples.setdefault((i, label), []).append(measure(call, repeat=1, min_time=STEADY_SAMPLE_S))
    for (i, label), times in samples.items():
        if label == "steady":
            runs[i].steady = statistics.median(times)
        else:
            runs[i].also_steady[label] = statistics.median(times)


def measure_streams(runs: list[Run]) -> None:
    """Stream totals as medians: ``STREAM_ROUNDS − 1`` more runs of each engine's whole stream
    (``Run.restream``: a fresh function and cache, so compiles count every time), in turns over the
    engines like ``measure_steady``'s samples — one 0.2–0.3 s stream on a machine that drifts 20–30 %
    within seconds was a coin toss between engines a few percent apart. The first calls, compiles and
    cache figures stay those of the first run."""
    for _ in range(STREAM_ROUNDS - 1):
        for run in runs:
            if run.restream is not None:
                time.sleep(SETTLE_S)
                run.stream_totals.append(run.restream())
    for run in runs:
        if run.stream_totals:
            run.stream_total = statistics.median(run.stream_totals)


def measure_landing(w: Workload, options: dict[str, Any]) -> tuple[float, int]:
    """A fresh function called on the steady input in a loop, as a program would: seconds and calls
    until one ran native code (``LANDING_LIMIT_S`` at most). The compile worker gets the CPU the loop
    leaves, and a core the loop lends it once the loop is hot on that code (``msvm.msjit.compiler``)."""
    ms.vm.reset()
    fn = w.make(**options)
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < LANDING_LIMIT_S:
        fn(*w.steady)
        calls += 1
        if any(e["hits"] for e in ms.vm.jit_info() if e["function"] == fn.__name__):
            break
    return time.perf_counter() - t0, calls


def bench_torch(w: Workload, compiled: bool, reference: np.ndarray) -> Run:
    import torch

    fn = w.torch
    engine = "torch eager"
    if compiled:
        fn = torch.compile(w.torch)
        engine = "torch.compile"
    with torch.inference_mode():
        run = run_stream(engine, fn, w, torch.from_numpy)
        steady = tuple(torch.from_numpy(a) for a in w.steady)
        out = fn(*steady).numpy()
        run.max_abs_err = float(np.max(np.abs(out - reference)))
        measure_switches(run, w, fn, torch.from_numpy)

    def inferring(*args: Any) -> Any:
        with torch.inference_mode():
            return fn(*args)

    def restream() -> float:
        with torch.inference_mode():
            return run_stream(engine, fn, w, torch.from_numpy).stream_total

    run.probes = probes(inferring, w, torch.from_numpy)
    if not compiled:  # torch.compile's graphs stay cached: a fresh start costs seconds per model
        run.restream = restream
    return run


def bench_workload(w: Workload, args: argparse.Namespace, torch_mod: Any) -> list[Run]:
    fn_ref = w.make(hot_threshold=1 << 30)
    reference = np.asarray(fn_ref.py_func(*w.steady))
    runs = []
    numpy_run = run_stream("numpy eager", fn_ref.py_func, w)
    numpy_run.probes = probes(fn_ref.py_func, w)
    numpy_run.max_abs_err = 0.0
    numpy_run.restream = lambda: run_stream("", fn_ref.py_func, w).stream_total
    measure_switches(numpy_run, w, fn_ref.py_func)
    runs.append(numpy_run)
    runs.append(bench_msvm(w, "msvm interp", {"hot_threshold": 1 << 30}, reference))
    for mode in w.modes:
        options: dict[str, Any] = {"cache_mode": mode, "mem_optimize": True}
        if mode == "bucket":
            options["bucket_boundaries"] = BUCKETS
        try:
            runs.append(bench_msvm(w, f"msvm jit {mode}", options, reference))
        except ms.MsvmError as exc:
            runs.append(Run(f"msvm jit {mode}", error=f"{type(exc).__name__}: {exc.message}"))
    if torch_mod is not None and w.torch is not None:
        runs.append(bench_torch(w, False, reference))
        if args.torch_compile and w.name not in args.skip_compile:
            try:
                runs.append(bench_torch(w, True, reference))
            except Exception as exc:  # torch.compile may be unavailable (no compiler toolchain)
                runs.append(Run("torch.compile", error=f"{type(exc).__name__}: {str(exc)[:80]}"))
    measure_streams(runs)
    measure_steady(runs)
    return runs


def report(w: Workload, runs: list[Run], peaks: tuple[float, float]) -> str:
    sgemm, bandwidth = peaks
    by = {r.engine: r for r in runs}
    base = by["numpy eager"].steady
    torch_eager = by.get("torch eager")
    flops, nbytes = w.flops(w.steady), w.bytes(w.steady)
    rows = []
    for r in runs:
        if r.error:
            rows.append([r.engine, "error: " + r.error] + [""] * 10)
            continue
        rate = ""
        if flops:
            rate = f"{flops / r.steady / 1e9:.1f} GFLOP/s ({flops / r.steady / 1e9 / sgemm:.0%} of peak)"
        elif nbytes:
            rate = f"{nbytes / r.steady / 1e9:.1f} GB/s ({nbytes / r.steady / 1e9 / bandwidth:.0%} of BW)"
        firsts = list(r.first_calls.values())
        rows.append(
            [
                r.engine,
                fmt_time(r.steady),
                fmt_ratio(r.steady / base),
                fmt_ratio(r.steady / torch_eager.steady) if torch_eager and torch_eager.steady else "-",
                rate,
                fmt_time(statistics.median(firsts)) if firsts else "-",
                fmt_time(max(firsts)) if firsts else "-",
                fmt_time(r.stream_total),
                "-" if r.compiles is None else r.compiles,
                "-" if r.entries is None else r.entries,
                "-" if r.hit_rate is None else f"{r.hit_rate:.0%}",
                f"{r.max_abs_err:.1e}" if r.max_abs_err is not None else "-",
            ]
        )
    header = [
        "engine",
        "steady (after wait_for_compiles)",
        "÷ numpy",
        "÷ torch eager",
        "rate",
        "first call (median)",
        "first call (max)",
        f"stream total ({len(w.stream)} calls, median of {STREAM_ROUNDS})",
        "compiles",
        "entries",
        "hit rate",
        "max |err|",
    ]
    out = table(f"{w.name}: {w.title}", header, rows)
    out += (f"\nmachine around this workload (best of just before and just after it): sgemm peak {sgemm:.0f} "
            f"GFLOP/s, memory bandwidth {bandwidth:.1f} GB/s")
    if flops:
        out += f"\ncompute roofline at the steady input: {fmt_time(flops / (sgemm * 1e9))} (sgemm peak)"
    elif nbytes:
        out += f"\nbandwidth floor at the steady input: {fmt_time(nbytes / (bandwidth * 1e9))}"
    for label, args in w.also_steady:
        bound = w.flops(args) / (sgemm * 1e9) if w.flops(args) else w.bytes(args) / (bandwidth * 1e9)
        kind = "compute roofline" if w.flops(args) else "bandwidth floor"
        times = ", ".join(f"{r.engine} {fmt_time(r.also_steady[label])} ({r.also_steady[label] / bound:.2f}×)"
                          for r in runs if label in r.also_steady)
        out += f"\nsteady at {label} ({kind} {fmt_time(bound)}): {times}"
    switching = [r for r in runs if r.switch_ratios]
    if switching:
        ratios = ", ".join(f"{r.engine} median {statistics.median(r.switch_ratios):.2f}× "
                           f"(max {max(r.switch_ratios):.2f}×; ÷ steady median "
                           f"{statistics.median(r.switch_steady_ratios):.2f}×)" for r in switching)
        out += (f"\nlater shape switches (the stream again, every shape warm) ÷ the same input's next call: "
                f"{ratios}")
    landed = [r for r in runs if r.landing]
    if landed:
        times = ", ".join(f"{r.engine} {fmt_time(r.landing[0])} ({r.landing[1]} calls)"
                          + ("" if r.landing[0] < LANDING_LIMIT_S else " — none yet") for r in landed)
        out += f"\na fresh loop on the steady input, first native call after: {times}"
    for r in runs:
        if 0 < len(r.stream_totals) < STREAM_ROUNDS:
            out += f"\n{r.engine}: stream total from {len(r.stream_totals)} run(s)"
    for r in runs:
        if r.compile_ms:
            cpu = f" (CPU {statistics.median(r.compile_cpu_ms):.1f})" if r.compile_cpu_ms else ""
            out += f"\n{r.engine}: compile ms per entry median {statistics.median(r.compile_ms):.1f}{cpu}"
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workloads", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W5")
    parser.add_argument(
        "--no-torch-compile",
        dest="torch_compile",
        action="store_false",
        help="skip torch.compile (its first calls cost seconds per model)",
    )
    parser.add_argument("--skip-compile", default="W3", help="workloads where torch.compile is skipped")
    args = parser.parse_args(argv or [])
    args.skip_compile = set(filter(None, args.skip_compile.split(",")))
    torch_mod = optional_import("torch")
    if torch_mod is not None:
        torch_mod.set_num_threads(2)
    calibration = calibrate_first()
    peaks = before = machine_peaks()
    print(
        f"machine at the start: sgemm peak {peaks[0]:.0f} GFLOP/s (numpy float32 2048³), memory bandwidth "
        f"{peaks[1]:.1f} GB/s (copy); torch {'installed' if torch_mod else 'not installed'}; "
        f"jax {'installed' if optional_import('jax') else 'not installed'}; cost model: {calibration}"
    )
    print("steady figures are taken after ms.vm.wait_for_compiles, in this one process with its compile "
          "worker warm; for what a loop in a fresh process that never waits sees (time to native code, "
          "calls while compiles run, cold and warm-disk streams), run `python -m bench delivery`.")
    only = set(filter(None, args.only.split(",")))
    for w in workloads(torch_mod is not None):
        if only and w.name not in only:
            continue
        runs = bench_workload(w, args, torch_mod)
        after = machine_peaks()
        print(report(w, runs, (max(before[0], after[0]), max(before[1], after[1]))))
        before = after


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

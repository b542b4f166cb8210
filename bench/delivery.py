"""The delivery suite: what a user's loop sees in a fresh process that never waits for the JIT.

Every measurement runs in a fresh Python process of its own (``python -m bench.delivery --child
SPEC``, one JSON line back on stdout) whose loop never pauses and never calls
``ms.vm.wait_for_compiles``: the figures a program sees the first time it runs, not the steady state
``python -m bench workloads`` samples once compiles have landed. Two tables:

- **time to native** (W1, W3, W6): a loop on the workload's steady input from a freshly made function
  and an empty JIT cache until 200 calls after its first native call (or 10 s): how long from a key
  getting hot to its first native run, how many calls that took, the per-call times interpreted and
  native, and the calls that ran while the compile ran against the same input's calls in the same
  seconds of a loop in a process with the JIT off (target ≤ 1.25); W6 also its median call over the
  loop's first 1.5 s (target ≤ 5 µs).
- **streams** (W1's 24 calls, W3's 100): the stream total from a fresh process with an empty on-disk
  JIT cache (``MSVM_JIT_CACHE_DIR``), then from a second fresh process on the same cache directory,
  against torch eager and onnxruntime (the torch models exported to ONNX with dynamic axes) and
  numpy eager, each in its own fresh process (targets: first ÷ torch ≤ 1.0, second ÷ onnxruntime ≤ 1.5).

Before the first timed child one untimed warm-up child per workload puts msvm's kernel object cache and
calibration on disk (in the user's ``XDG_CACHE_HOME``, which every child keeps).

Peers appear only where they import (torch, onnxruntime with onnx for the export); msvm depends on
neither. Run: ``python -m bench delivery`` or ``python -m bench.delivery [--only W1,W3] [--rounds N]
[--quick]``.
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import Any

from . import harness
from .harness import fmt_ratio, fmt_time, table

MODES = {"W1": ("exact", "bucket"), "W3": ("bucket", "exact"), "W6": ("exact",)}
STREAM_WORKLOADS = ("W1", "W3")  # W6's stream is six calls of one input: its story is the loop's
ONNX_AXES = {"W1": {0: "N"}, "W3": {0: "L"}}  # the dims a stream changes: batch for W1, length for W3
ROUNDS, QUICK_ROUNDS = 5, 2
LIMIT_S, QUICK_LIMIT_S = 10.0, 6.0  # the longest a loop waits for native code (and its calls after)
AFTER_NATIVE, QUICK_AFTER_NATIVE = 200, 100  # calls a loop goes on for once native code ran
REF_LIMIT_S, QUICK_REF_LIMIT_S = 4.0, 2.0  # the JIT-off reference loop: it covers the seconds a JIT
# loop's compile runs in (W6 lands after 1–2 s), whose calls are compared with the reference's there
WINDOW_S = {"W6": 1.5}  # W6: the median call over the loop's first 1.5 s (target ≤ 5 µs)
CHECK_NS = 50_000_000  # how often the loop asks whether native code ran (jit_info costs ~0.1 ms:
# asked at every call it would be most of a native W6 call; the check is left out of the call times)
CHILD_SLACK_S = 180.0  # a child's start-up, imports and exit (LLVM finishing a compile) beyond its loop
TARGETS = {"during": 1.25, "w6_window_ns": 5_000, "first_vs_torch": 1.0, "second_vs_ort": 1.5}


# -- children: each runs in a fresh process and prints one JSON line -----------------------------------
def _workload(name: str, torch_ok: bool = False) -> Any:
    from .models import workloads

    return next(w for w in workloads(torch_ok) if w.name == name)


def jit_options(mode: str) -> dict[str, Any]:
    """The options ``python -m bench workloads`` gives each cache mode, so the two suites agree."""
    from .workloads import BUCKETS

    options: dict[str, Any] = {"cache_mode": mode, "mem_optimize": True}
    if mode == "bucket":
        options["bucket_boundaries"] = BUCKETS
    return options


def _entries(fname: str) -> list[dict]:
    import msvm as ms

    return [e for e in ms.vm.jit_info() if e["function"] == fname]


def _all_native(fname: str) -> bool:
    """Has every region of ``fname`` run native code at least once?"""
    hits: dict[int, int] = {}
    for e in _entries(fname):
        hits[e["region"]] = hits.get(e["region"], 0) + e["hits"]
    return bool(hits) and all(hits.values())


def _entry_facts(entries: list[dict]) -> dict[str, Any]:
    """What a run's cache says: its entries, those loaded from disk and their tiers."""
    return {
        "entries": len(entries),
        "statuses": dict(Counter(e["status"] for e in entries)),
        "from_disk": sum(1 for e in entries if e["source"] == "disk"),
        "tiers": dict(Counter(str(e["tier"]) for e in entries if e["tier"] is not None)),
        "compile_ms": [e["compile_ms"] for e in entries if e.get("compile_ms")],
    }


def _landing(entries: list[dict], ends: list[int]) -> dict[str, Any]:
    """When the loop's key got hot and when its first fully native call ran, as times and call indices:
    from jit_info's ``hot_ns`` (the first key hot: its compile was queued then) and ``native_ns`` (the
    call is native once its last region is), both on this process's perf_counter_ns clock."""
    n = len(ends)
    regions: dict[int, list[dict]] = {}
    for e in entries:
        regions.setdefault(e["region"], []).append(e)
    hot_ns = min((e["hot_ns"] for e in entries), default=None)
    hot_idx = min(bisect.bisect_left(ends, hot_ns), n - 1) if hot_ns is not None else None
    firsts = [min((e["native_ns"] for e in es if e["native_ns"] is not None), default=None)
              for es in regions.values()]
    native_ns = native_idx = None
    if firsts and None not in firsts and bisect.bisect_left(ends, max(firsts)) < n:
        native_ns = max(firsts)
        native_idx = bisect.bisect_left(ends, native_ns)
    return {"hot_ns": hot_ns, "hot_idx": hot_idx, "native_ns": native_ns, "native_idx": native_idx}


def child_loop(spec: dict[str, Any]) -> dict[str, Any]:
    """A fresh function called on the steady input in a loop that never pauses; timestamps after each
    call, jit_info read once the loop is over. ``spec["mode"]`` None: the JIT switched off, a loop of
    ``limit_s`` whose calls (``trace``: start offset and duration) are the interpreted reference the
    calls during a compile are compared with, over the same seconds of the loop."""
    import msvm as ms

    w = _workload(spec["workload"])
    mode = spec.get("mode")
    if mode is None:
        ms.set_context(jit_enabled=False)
        options: dict[str, Any] = {}
    else:
        options = jit_options(mode)
    fn = w.make(**options)
    args = w.steady
    limit_ns = int(spec["limit_s"] * 1e9)
    window_ns = int(spec.get("window_s", 0.0) * 1e9)
    after = int(spec["after_native"])
    ends: list[int] = []
    resumed: dict[int, int] = {}  # call index -> when it started, where a check ran just before it
    native_at: int | None = None  # the call count when a check first saw every region native
    clock = time.perf_counter_ns
    t_start = clock()
    next_check = t_start + CHECK_NS
    while True:
        fn(*args)
        now = clock()
        ends.append(now)
        elapsed = now - t_start
        if elapsed >= limit_ns:
            break
        if native_at is not None:
            if len(ends) - native_at >= after and elapsed >= window_ns:
                break
        elif mode is not None and now >= next_check:
            if _all_native(fn.__name__):
                native_at = len(ends)
            resumed[len(ends)] = next_check = clock()
            next_check += CHECK_NS
    loop_ns = ends[-1] - t_start
    starts = [resumed.get(i, ends[i - 1] if i else t_start) for i in range(len(ends))]
    durations = [e - s for s, e in zip(starts, ends)]
    entries = _entries(fn.__name__) if mode is not None else []
    land = _landing(entries, ends) if mode is not None else {}
    native_idx = land.get("native_idx")
    before = durations[1:native_idx] if native_idx is not None else durations[1:]
    during, span = [], None
    if native_idx is not None and land.get("hot_idx") is not None:
        during = durations[land["hot_idx"] + 1:native_idx]  # started after the key got hot
        if during:  # the seconds of the loop they ran in, for the JIT-off reference's calls
            span = [starts[land["hot_idx"] + 1] - t_start, ends[native_idx - 1] - t_start]
    window = [d for d, e in zip(durations, ends) if e - t_start <= window_ns] if window_ns else []
    return {
        "kind": "loop",
        "workload": w.name,
        "mode": mode,
        "calls": len(ends),
        "loop_ns": loop_ns,
        "first_call_ns": durations[0],
        "interp_median_ns": _med(before),  # calls before native code, the first call left out
        "native_median_ns": _med(durations[native_idx:]) if native_idx is not None else None,
        "during_median_ns": _med(during),
        "during_calls": len(during),
        "during_span_ns": span,
        "window_median_ns": _med(window),
        "window_calls": len(window),
        "latency_ns": (land["native_ns"] - land["hot_ns"]
                       if land.get("native_ns") is not None and land.get("hot_ns") is not None else None),
        "calls_before_native": native_idx,
        "hits": sum(e["hits"] for e in entries),
        **({"cache": _entry_facts(entries)} if mode is not None else
           {"trace": [[s - t_start, d] for s, d in zip(starts, durations)]}),
    }


def reference_med(trace: list[list[int]], span: list[int] | None) -> float | None:
    """The JIT-off loop's median call over ``span`` (offsets from its loop's start; every call after
    its first where None): a fresh process's early calls are slower for reasons of their own (W3's
    first hundred interpreted: 2.5–4.8 ms against 2.0–2.3 later), so a compile's calls are compared
    with the reference's over the same seconds. Calls overlapping the span where none fits in it, its
    last quarter where the span starts after the reference loop ended."""
    calls = trace[1:]
    if span is None:
        return _med([d for _, d in calls])
    inside = [d for s, d in calls if s >= span[0] and s + d <= span[1]]
    overlapping = [d for s, d in calls if s < span[1] and s + d > span[0]]
    return _med(inside or overlapping or [d for _, d in calls[len(calls) * 3 // 4:]])


def _max_err(out: Any, reference: Any) -> float:
    import numpy as np

    return float(np.max(np.abs(np.asarray(out, dtype=np.float64) - np.asarray(reference, dtype=np.float64))))


def child_stream(spec: dict[str, Any]) -> dict[str, Any]:
    """The workload's whole stream once, timed from its first call (making the function, converting the
    inputs and creating an onnxruntime session left out) on ``spec["engine"]``: msvm (``mode``),
    torch eager, onnxruntime (``model``: an ONNX file) or numpy eager."""
    engine = spec["engine"]
    w = _workload(spec["workload"], torch_ok=engine == "torch")
    result: dict[str, Any] = {"kind": "stream", "workload": w.name, "engine": engine,
                              "mode": spec.get("mode")}
    clock = time.perf_counter_ns
    if engine == "msvm":
        import msvm as ms

        fn = w.make(**jit_options(spec["mode"]))
        t0 = clock()
        for args in w.stream:
            out = fn(*args)
        result["total_ns"] = clock() - t0
        result["cache"] = _entry_facts(_entries(fn.__name__))
        if spec.get("settle"):  # untimed: the first run's compiles land, so the disk cache holds them
            ms.vm.wait_for_compiles(120)
    elif engine == "torch":
        import torch

        inputs = [tuple(torch.from_numpy(a) for a in args) for args in w.stream]
        with torch.inference_mode():
            t0 = clock()
            for args in inputs:
                out = w.torch(*args)
            result["total_ns"] = clock() - t0
        out = out.numpy()
        result["threads"] = torch.get_num_threads()
    elif engine == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(spec["model"], providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        t0 = clock()
        for args in w.stream:
            out = session.run(None, {name: args[0]})[0]
        result["total_ns"] = clock() - t0
        result["version"] = ort.__version__
    elif engine == "numpy":
        py = w.make(hot_threshold=1 << 30).py_func
        t0 = clock()
        for args in w.stream:
            out = py(*args)
        result["total_ns"] = clock() - t0
    else:
        raise ValueError(f"unknown engine {engine!r}")
    # outside the timing: the last call's output against the numpy reference (an export gone wrong shows)
    reference = w.make(hot_threshold=1 << 30).py_func(*w.stream[-1])
    result["max_abs_err"] = _max_err(out, reference)
    return result


def child_export(spec: dict[str, Any]) -> dict[str, Any]:
    """Export the torch models of ``spec["workloads"]`` to ONNX in ``spec["dir"]``, with the dims their
    streams change as dynamic axes (the TorchScript exporter, ``dynamo=False``: it needs the onnx
    package). Returns each model's path, or why it failed."""
    import torch

    out: dict[str, Any] = {"kind": "export", "models": {}, "errors": {}}
    for name in spec["workloads"]:
        w = _workload(name, torch_ok=True)

        class Model(torch.nn.Module):
            def __init__(self, f: Any) -> None:
                super().__init__()
                self.f = f

            def forward(self, x: Any) -> Any:
                return self.f(x)

        path = os.path.join(spec["dir"], f"{name}.onnx")
        try:
            torch.onnx.export(Model(w.torch), tuple(torch.from_numpy(a) for a in w.steady), path,
                              input_names=["x"], output_names=["y"], dynamo=False,
                              dynamic_axes={"x": ONNX_AXES[name], "y": {0: ONNX_AXES[name][0]}})
            out["models"][name] = path
        except Exception as exc:
            out["errors"][name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def child_warmup(spec: dict[str, Any]) -> dict[str, Any]:
    """Untimed: calibrate and run every mode's stream and steady input to landed compiles, so the kernel
    object cache and the calibration are on disk before the first timed child (a machine's very
    first process compiling its kernels is another story than the one this suite tells)."""
    import msvm as ms

    from .harness import calibrate_first

    t0 = time.perf_counter()
    calibration = calibrate_first()
    w = _workload(spec["workload"])
    for mode in MODES[w.name]:
        fn = w.make(**jit_options(mode))
        for _ in range(2):
            for args in w.stream:
                fn(*args)
            for _ in range(4):
                fn(*w.steady)
            ms.vm.wait_for_compiles(120)
    return {"kind": "warmup", "workload": w.name, "calibration": calibration,
            "seconds": time.perf_counter() - t0}


CHILDREN = {"loop": child_loop, "stream": child_stream, "export": child_export, "warmup": child_warmup}


def child_main(spec_json: str) -> int:
    """A child's entry point: run the spec, print its result as one JSON line (an error as one too)."""
    return harness.child_main(spec_json, lambda spec: CHILDREN[spec["kind"]](spec))


# -- the parent: children in turns, then the tables ----------------------------------------------------
def run_child(spec: dict[str, Any], *, cache_dir: str | None = None, timeout_s: float | None = None) -> dict:
    """Run one child in a fresh process and return its JSON result (``{"error": ...}`` if it failed).

    The environment is this process's (so ``XDG_CACHE_HOME``, where the kernel object cache and the
    calibration live, is the user's own) with ``MSVM_JIT_CACHE_DIR`` set to ``cache_dir``."""
    if timeout_s is None:
        timeout_s = spec.get("limit_s", 0.0) + CHILD_SLACK_S
    env = {"MSVM_JIT_CACHE_DIR": cache_dir} if cache_dir is not None else None
    return harness.run_child("delivery", spec, timeout_s, env)


def _fresh_dir() -> str:
    return tempfile.mkdtemp(prefix="msvm-delivery-jit-")


def _pct(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation: p50/p90 of a handful of rounds."""
    if not values:
        return None
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _ns(value: float | None) -> str:
    return fmt_time(None if value is None else value / 1e9)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _med(values: list[float | None] | list[int]) -> float | None:
    """The median of the values that are there (None: not measured), or None."""
    kept = [v for v in values if v is not None]
    return float(statistics.median(kept)) if kept else None


class Errors:
    """Children that failed, reported after the tables (one line each, first occurrence)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def check(self, label: str, result: dict) -> dict | None:
        if "error" in result:
            line = f"{label}: {result['error'].splitlines()[0][:300]}"
            if line not in self.lines:
                self.lines.append(line)
            return None
        return result


def time_to_native(names: list[str], rounds: int, quick: bool, errors: Errors) -> str:
    limit = QUICK_LIMIT_S if quick else LIMIT_S
    after = QUICK_AFTER_NATIVE if quick else AFTER_NATIVE
    ref_limit = QUICK_REF_LIMIT_S if quick else REF_LIMIT_S
    loops: dict[tuple[str, str], list[dict]] = {}
    refs: dict[str, list[dict | None]] = {}
    for _ in range(rounds):  # in turns: a slow spell of the machine costs every configuration a round
        for name in names:
            window = WINDOW_S.get(name, 0.0)
            cache_dir = _fresh_dir()
            try:
                ref = run_child({"kind": "loop", "workload": name, "mode": None, "limit_s": ref_limit,
                                 "after_native": after, "window_s": window}, cache_dir=cache_dir)
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
            refs.setdefault(name, []).append(errors.check(f"{name} jit off", ref))
            for mode in MODES[name]:
                cache_dir = _fresh_dir()  # an empty JIT cache: this loop compiles its own code
                try:
                    res = run_child({"kind": "loop", "workload": name, "mode": mode, "limit_s": limit,
                                     "after_native": after, "window_s": window}, cache_dir=cache_dir)
                finally:
                    shutil.rmtree(cache_dir, ignore_errors=True)
                res = errors.check(f"{name} {mode}", res)
                loops.setdefault((name, mode), []).append(res)
    rows, notes = [], []
    for (name, mode), results in loops.items():
        ok = [r for r in results if r is not None]
        if not ok:
            rows.append([name, mode, f"0/{len(results)}"] + ["-"] * 9)
            continue
        latencies = [r["latency_ns"] for r in ok if r["latency_ns"] is not None]
        landed = [r for r in ok if r["calls_before_native"] is not None]
        traces = [r["trace"] for r in refs[name] if r]
        ref_all = _med([reference_med(t, None) for t in traces])
        # each round's calls during its compile over the JIT-off children's calls in the same seconds of
        # their loops: the median over all those children, not one round's own, whose per-call time
        # drifts from process to process here (W6: 110 or 180 µs) — a ratio to one would measure that
        during = _med([_ratio(r["during_median_ns"], _med([reference_med(t, r["during_span_ns"])
                                                            for t in traces]))
                       for r in ok if r["during_span_ns"] is not None])
        interp, native = _med([r["interp_median_ns"] for r in ok]), _med([r["native_median_ns"] for r in ok])
        rows.append([
            name, mode,
            f"{len(landed)}/{len(results)}",
            _ms(_pct(latencies, 0.5)), _ms(_pct(latencies, 0.9)),
            _fmt_count(_med([r["calls_before_native"] for r in ok])),
            _ns(_med([r["first_call_ns"] for r in ok])),
            _ns(interp), _ns(native), fmt_ratio(_ratio(interp, native)),
            _ns(ref_all),
            _fmt_during(during, _med([r["during_calls"] for r in landed])),
        ])
        if name in WINDOW_S:
            window = _med([r["window_median_ns"] for r in ok])
            calls = _fmt_count(_med([r["window_calls"] for r in ok]))
            notes.append(f"{name} {mode}: median call over the loop's first {WINDOW_S[name]:g} s: "
                         f"{_ns(window)} (target ≤ {_ns(TARGETS['w6_window_ns'])}; {calls} calls, "
                         f"median of {len(ok)} rounds)")
    header = ["workload", "mode", "reached native", "native − hot p50 (ms)", "p90 (ms)",
              "calls before native", "first call", "interpreted per call", "native per call",
              "interp ÷ native", "jit off per call",
              f"calls during compile ÷ jit off (target ≤ {TARGETS['during']})"]
    out = table(f"Time to native: a loop on the steady input from a fresh process, {rounds} rounds "
                f"(limit {limit:g} s, {after} calls after native)", header, rows)
    out += ("\nper call: medians over the rounds of each round's median; interpreted = the JIT loop's calls "
            "before its first native one (its first call left out, shown apart); calls during compile = "
            "those started after the key got hot and done before the first native call (n: their median "
            "count a round), their median over the JIT-off children's median call in the same seconds of "
            "their loops (one child a round, ms.set_context(jit_enabled=False), all rounds' pooled), the "
            "median of those ratios; jit off per call: over the whole reference loop")
    return out + "".join(f"\n{n}" for n in notes)


def _fmt_count(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _fmt_during(ratio: float | None, calls: float | None) -> str:
    if ratio is None:
        return "- (no call ran during the compile)" if calls == 0 else "-"
    return f"{fmt_ratio(ratio)} (n {calls:g})"


def streams(names: list[str], rounds: int, errors: Errors, peers: dict[str, bool]) -> str:
    models: dict[str, str] = {}
    export_dir = None
    if peers["onnxruntime"]:
        export_dir = tempfile.mkdtemp(prefix="msvm-delivery-onnx-")
        spec = {"kind": "export", "workloads": names, "dir": export_dir}
        export = errors.check("onnx export", run_child(spec))
        if export:
            models = export["models"]
            for name, why in export["errors"].items():
                errors.lines.append(f"{name} onnx export: {why}")
    results: dict[tuple[str, str], list[dict | None]] = {}
    try:
        for _ in range(rounds):
            for name in names:
                for mode in MODES[name]:
                    cache_dir = _fresh_dir()  # per round and mode: the first run finds it empty
                    try:
                        for run, settle in (("first", True), ("second", False)):
                            spec = {"kind": "stream", "workload": name, "engine": "msvm", "mode": mode,
                                    "settle": settle}
                            res = run_child(spec, cache_dir=cache_dir)
                            results.setdefault((name, f"{mode} {run}"), []).append(
                                errors.check(f"{name} msvm {mode} {run} run", res))
                    finally:
                        shutil.rmtree(cache_dir, ignore_errors=True)
                peer_specs = [("numpy", {})]
                if peers["torch"]:
                    peer_specs.append(("torch", {}))
                if name in models:
                    peer_specs.append(("onnxruntime", {"model": models[name]}))
                for engine, extra in peer_specs:
                    res = run_child({"kind": "stream", "workload": name, "engine": engine, **extra})
                    results.setdefault((name, engine), []).append(errors.check(f"{name} {engine}", res))
    finally:
        if export_dir:
            shutil.rmtree(export_dir, ignore_errors=True)

    def totals(name: str, key: str) -> list[float | None]:
        return [r["total_ns"] if r else None for r in results.get((name, key), [None] * rounds)]

    rows = []
    for name in names:
        torch_t, ort_t, numpy_t = totals(name, "torch"), totals(name, "onnxruntime"), totals(name, "numpy")
        for mode in MODES[name]:
            first, second = totals(name, f"{mode} first"), totals(name, f"{mode} second")
            seconds = [r for r in results[(name, f"{mode} second")] if r]
            disk = [r["cache"]["from_disk"] for r in seconds]
            tiers: Counter[str] = Counter()
            for r in seconds:
                tiers.update(r["cache"]["tiers"])
            entries = _med([r["cache"]["entries"] for r in seconds])
            errs = [r["max_abs_err"] for r in results[(name, f"{mode} first")] + seconds if r]
            # ratios of the medians shown: a fresh process's stream varies too much from one to the next
            # (torch eager's W1: 0.17–1.9 s) for a ratio paired by round to mean much over a few rounds
            mf, ms_, mt, mo = _med(first), _med(second), _med(torch_t), _med(ort_t)
            rows.append([
                name, mode,
                _ns(mf), _ns(ms_), _ns(mt), _ns(mo), _ns(_med(numpy_t)),
                fmt_ratio(_ratio(mf, mt)), fmt_ratio(_ratio(ms_, mo)), fmt_ratio(_ratio(ms_, mf)),
                "-" if not disk else f"{statistics.median(disk):g} of {_fmt_count(entries)}",
                "-" if not tiers else ", ".join(f"{t}: {n}" for t, n in sorted(tiers.items())),
                f"{max(errs):.1e}" if errs else "-",
            ])
    lengths = {"W1": 24, "W3": 100}
    header = ["workload", "mode", "msvm first run", "msvm second run", "torch eager", "onnxruntime",
              "numpy eager", f"first ÷ torch (target ≤ {TARGETS['first_vs_torch']})",
              f"second ÷ onnxruntime (target ≤ {TARGETS['second_vs_ort']})", "second ÷ first",
              "second run: entries from disk", "second run: tiers (all rounds)", "max |err| msvm"]
    calls = ", ".join(f"{n} {lengths.get(n, 0)} calls" for n in names)
    out = table(f"Streams from fresh processes ({calls}), totals: median of {rounds} rounds", header, rows)
    peer_errs = [f"{e} {max(r['max_abs_err'] for r in results[(n, e)] if r):.1e}"
                 for n in names for e in ("torch", "onnxruntime") if any(results.get((n, e), []))]
    out += ("\nfirst run: an empty JIT cache dir (MSVM_JIT_CACHE_DIR, new each round and mode); after its "
            "timed stream it lets its compiles land (untimed) so the cache is what a finished process "
            "leaves. second run: a fresh process on that same dir. Making the function, converting inputs "
            "and creating the onnxruntime session are left out; every first call is in. Ratios: of the "
            "medians shown.")
    if peer_errs:
        out += f"\npeers' max |err| against numpy on the last call: {', '.join(peer_errs)}"
    return out


def peers_available() -> dict[str, bool]:
    """Which peers can run: torch eager, and onnxruntime (which needs torch and onnx for the export)."""
    found = {m: importlib.util.find_spec(m) is not None for m in ("torch", "onnx", "onnxruntime")}
    return {"torch": found["torch"], "onnxruntime": all(found.values()), "onnx": found["onnx"],
            "onnxruntime_installed": found["onnxruntime"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.delivery", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated workloads of W1,W3,W6, e.g. W1,W3")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"fresh processes per figure (default {ROUNDS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ROUNDS} rounds, shorter loops (limit {QUICK_LIMIT_S:g} s, "
                        f"{QUICK_AFTER_NATIVE} calls after native)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # a child's spec, JSON
    args = parser.parse_args(argv or [])
    if args.child is not None:
        sys.exit(child_main(args.child))
    only = [n for n in filter(None, args.only.split(","))]
    unknown = [n for n in only if n not in MODES]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; this suite runs {', '.join(MODES)}")
    names = only or list(MODES)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    peers = peers_available()
    errors = Errors()
    print("Delivery: what a program's loop sees. Every figure comes from a fresh Python process (one "
          "per measurement) whose loop never pauses and never calls ms.vm.wait_for_compiles; peers run "
          "in fresh processes of their own in the same rounds. Medians over rounds, and ratios.")
    missing = [m for m, ok in (("torch", peers["torch"]), ("onnxruntime", peers["onnxruntime_installed"]),
                               ("onnx", peers["onnx"])) if not ok]
    ort = "yes" if peers["onnxruntime"] else f"no ({', '.join(missing)} not installed)"
    disk_off = os.environ.get("MSVM_JIT_CACHE") == "0"
    print(f"peers: torch eager {'yes' if peers['torch'] else 'no'}; onnxruntime {ort}; XDG_CACHE_HOME "
          f"{os.environ.get('XDG_CACHE_HOME') or '~/.cache (default)'}"
          + ("; MSVM_JIT_CACHE=0 is set: the disk cache is off" if disk_off else ""))
    warm = []
    for name in names:  # untimed: kernel objects and calibration on disk before the first timed child
        res = run_child({"kind": "warmup", "workload": name}, cache_dir=_scratch())
        if errors.check(f"{name} warm-up", res):
            warm.append(f"{name} {res['seconds']:.1f} s (calibration: {res['calibration']})")
    print("warm-up (untimed, one fresh process per workload, a throwaway JIT cache dir): msvm's native "
          "kernel object cache and calibration are on disk in the user's cache before the first timed "
          "child — a machine's very first process compiling kernels is another story: "
          + ("; ".join(warm) or "failed"))
    print(time_to_native(names, rounds, args.quick, errors))
    stream_names = [n for n in names if n in STREAM_WORKLOADS]
    if stream_names:
        print(streams(stream_names, rounds, errors, peers))
    for line in errors.lines:
        print(f"failed: {line}")


_SCRATCH: list[str] = []


def _scratch() -> str:
    """A throwaway JIT cache dir for the warm-up children, removed at exit."""
    if not _SCRATCH:
        import atexit

        _SCRATCH.append(_fresh_dir())
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return _SCRATCH[0]


if __name__ == "__main__":
    main(sys.argv[1:])

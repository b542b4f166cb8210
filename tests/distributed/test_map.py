"""ms.distributed on a two-process LocalCluster: ordered, complete, errors by batch, one compile per key."""

# ms.Tensor["N", 8] reads to linters as a string forward reference: F821 is noise here.
# ruff: noqa: F821

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import msvm as ms

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")
# The helpers below run on the workers, which cannot import this test module: they travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

W = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)


@ms.jit
def layer(x: ms.Tensor["N", 8]):
    return ms.ops.gelu(x @ W) * 1.5 + 0.5


def _sources_stamp() -> list[tuple[str, int]]:
    """msvm's source files and their modification times: the msvm the workers import and digest."""
    return sorted((str(p), p.stat().st_mtime_ns) for p in Path(ms.__file__).parent.rglob("*.py"))


def _batches(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(2)
    return [rng.standard_normal((1 + 3 * (i % 6), 8)).astype(np.float32) for i in range(n)]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    """Two single-threaded worker processes sharing one persistent code cache (started once)."""
    saved = {k: os.environ.get(k) for k in ("MSVM_JIT_CACHE", "MSVM_JIT_CACHE_DIR")}
    os.environ["MSVM_JIT_CACHE"] = "1"  # the workers inherit these when they are spawned
    os.environ["MSVM_JIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("shared-jit-cache"))
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                       dashboard_address=None, silence_logs=50)
    client = distributed.Client(cluster)
    client.wait_for_workers(2, timeout=60)  # the tests name both workers, and a map spreads over them
    client.sources_at_start = _sources_stamp()
    yield client
    client.close()
    cluster.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_results_come_back_in_input_order_equal_to_one_process(client):
    batches = _batches(60)
    out = ms.distributed.map_batches(layer, batches, client, progress=False)
    assert len(out) == len(batches)
    for got, b in zip(out, batches):
        np.testing.assert_allclose(got, layer(b), rtol=1e-5, atol=1e-6)


def test_batch_size_splits_one_array_and_map_blocks_is_a_lazy_dask_array(client):
    x = np.random.default_rng(3).standard_normal((23, 8)).astype(np.float32)
    out = ms.distributed.map_batches(layer, x, client, batch_size=5, progress=False)
    assert [len(o) for o in out] == [5, 5, 5, 5, 3]
    np.testing.assert_allclose(np.concatenate(out), layer(x), rtol=1e-5, atol=1e-6)
    y = ms.distributed.map_blocks(layer, da.from_array(x, chunks=(7, 8)))
    assert isinstance(y, da.Array) and y.shape == (23, 16) and y.dtype == np.float32
    np.testing.assert_allclose((y * 2).compute(), layer(x) * 2, rtol=1e-5, atol=1e-6)


def test_a_one_worker_cluster_maps_too():
    """With one worker there is no preferred worker to name (Dask refuses allow_other_workers then)."""
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0",
                                  silence_logs=50) as cluster, distributed.Client(cluster) as one:
        batches = _batches(7)
        out = ms.distributed.map_batches(layer, batches, one, progress=False)
    assert len(out) == len(batches)
    for got, b in zip(out, batches):
        np.testing.assert_allclose(got, layer(b), rtol=1e-5, atol=1e-6)


def test_a_bad_batch_names_its_index_and_the_msvm_error(client):
    batches = _batches(8)
    batches[5] = np.ones((4, 7), np.float32)
    with pytest.raises(ms.MsvmError, match=r"batch 5 of 8 failed: ShapeError \[E-SHAPE") as err:
        ms.distributed.map_batches(layer, batches, client, progress=False)
    assert err.value.code.startswith("E-SHAPE")
    out = ms.distributed.map_batches(layer, batches, client, progress=False, return_exceptions=True)
    assert isinstance(out[5], ms.MsvmError) and "batch 5" in str(out[5])
    assert all(isinstance(o, np.ndarray) for i, o in enumerate(out) if i != 5)


def test_cluster_statistics_list_both_workers(client):
    ms.distributed.map_batches(layer, _batches(12), client, progress=False)
    info = ms.distributed.cluster_jit_info(client)
    assert sorted(info) == sorted(client.scheduler_info(n_workers=-1)["workers"]) and len(info) == 2
    assert any(entries for entries in info.values())
    for entries in info.values():
        assert set(ms.distributed.summary(entries)) == {"entries", "hits", "compiles", "disk_loads"}


def _warm(fn, x):
    """Run ``fn`` until its key is hot and compiled (or loaded): per entry of ``fn``, its status and
    source, the file the persistent code cache keeps its code in, and whether that file is there."""
    from msvm.msjit import diskcache
    from msvm.msjit.cache import CACHE

    for _ in range(4):
        fn(x)
    assert ms.vm.wait_for_compiles(60)
    found = []
    for e in CACHE.all():
        if e.function == fn.__name__:
            name = diskcache.file_name(e.owner, e.cache_key)
            found.append((e.status, e.source, name, (diskcache.folder() / name).is_file()))
    return found


def test_a_key_compiled_by_one_worker_is_loaded_from_disk_by_the_other(client):
    @ms.jit
    def shared(x: ms.Tensor["N", 8]):
        return ms.ops.relu(x @ W) + 0.25

    x = np.ones((9, 8), np.float32)
    for attempt in range(3):
        first, second = sorted(client.scheduler_info(n_workers=-1)["workers"])
        compiled = client.submit(_warm, shared, x, workers=[first], pure=False).result()
        loaded = client.submit(_warm, shared, x, workers=[second], pure=False).result()
        # Files are named and checked by a digest of msvm's sources, read by each worker when it first
        # needs it, and code is imported lazily: where msvm's files changed while these workers lived (an
        # editable install being edited), the two may rightly not share. Then again, with fresh workers.
        if _sources_stamp() == client.sources_at_start or attempt == 2:
            break
        client.restart()
        client.wait_for_workers(2, timeout=60)
        client.run(ms.vm.clear_disk_cache)
        client.sources_at_start = _sources_stamp()
    assert [c[:2] for c in compiled] == [("compiled", "compiled")], compiled
    # Its compile stored the code before its compiles were idle: this key's own file, not a count of the
    # folder's files (the test process's own background compiles of ``layer`` write there too).
    (_, _, name, stored), = compiled
    assert stored, compiled
    # The same file (a differing name means the workers' region prefixes differ), loaded, not compiled.
    assert [c[:3] for c in loaded] == [("compiled", "disk", name)], (loaded, compiled)


def test_a_worker_killed_mid_map_loses_nothing(client):
    batches = _batches(80)
    scheduler = client.cluster.scheduler
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(
        out=ms.distributed.map_batches(layer, batches, client, progress=False)))
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a few batches done: the map is under way
        done = sum(ts.state == "memory" for k, ts in list(scheduler.tasks.items()) if "msvm-batch" in str(k))
        if done >= 5:
            break
        time.sleep(0.005)
    victim = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
    with pytest.raises(Exception):  # noqa: B017 - the worker dies while it answers
        client.run(os._exit, 1, workers=[victim])
    thread.join(60)
    assert not thread.is_alive()
    assert len(result["out"]) == len(batches)
    for got, b in zip(result["out"], batches):
        np.testing.assert_allclose(got, layer(b), rtol=1e-5, atol=1e-6)
    client.wait_for_workers(2, timeout=30)  # the nanny restarted it


def test_import_msvm_leaves_dask_out_and_ms_distributed_brings_it():
    import subprocess

    code = ("import sys, msvm as ms; assert 'dask' not in sys.modules and 'distributed' not in sys.modules; "
            "ms.distributed.map_batches; assert 'distributed' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_cluster_view_has_a_row_per_worker(client):
    pytest.importorskip("ipywidgets")
    from msvm_widgets import ClusterJITView

    ms.distributed.map_batches(layer, _batches(6), client, progress=False)
    view = ClusterJITView(client)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    assert [row[0] for row in view.rows()] == workers
    assert all(w in view.static_text() and w in view.static_html() for w in workers)
    assert "disk loads" in view.static_text()

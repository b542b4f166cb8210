"""One thread count: the job pool, the JIT's loop splits and the disk cache's file names all follow
``MSVM_NUM_THREADS`` (``kernels.threads.default_threads``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json
from msvm.kernels.threads import POOL, default_threads
from msvm.msjit import diskcache
from msvm.msjit.codegen.kernels import THREADS
from msvm.options import JitOptions

class Region:  # what diskcache._prefix reads of a region runtime
    settings = JitOptions()
    exe_name = "f"
    region = type("R", (), {"start": 0})()
    digest = "d"

print(json.dumps({"pool": POOL.threads, "jit": THREADS, "default": default_threads(),
                  "prefix": diskcache._prefix(Region())}))
"""


def _probe(threads: str) -> dict:
    env = {**os.environ, "MSVM_NUM_THREADS": threads}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_jit_splits_over_the_pool_size_msvm_num_threads_sets():
    three = _probe("3")
    assert three["pool"] == three["jit"] == three["default"] == 3


def test_disk_cache_file_names_differ_by_thread_count():
    # Code planned for 3 threads sizes per-thread scratch for 3: a 5-thread process must not load it.
    assert _probe("3")["prefix"] != _probe("5")["prefix"]

"""Suite-wide setup: msvm's on-disk caches live in a temporary directory for the whole test session.

The scheduler persists its calibration under ``$XDG_CACHE_HOME/msvm``; tests must neither read a
developer's cache nor leave made-up calibrations behind. Set before msvm is imported anywhere, so
subprocesses (notebook kernels, the CLI, cold-start probes) inherit it too.
"""

import os
import tempfile

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="msvm-test-cache-")
# The persistent JIT code cache would let one test's compiles serve another's keys (a test that counts
# compiles would find none): it is off unless a test switches it on with a folder of its own.
os.environ.setdefault("MSVM_JIT_CACHE", "0")
# The key that seals cache files lives outside the caches (``native.objcache.key_file``): the suite's own.
os.environ["MSVM_CACHE_KEY"] = os.path.join(tempfile.mkdtemp(prefix="msvm-test-key-"), "msvm", "cache.key")
# Background calibration would compete with the suite for the 2 cores; tests that exercise it
# switch it on explicitly.
os.environ.setdefault("MSVM_BACKGROUND_CALIBRATION", "0")

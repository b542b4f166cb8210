"""``msvm demo``: the quickstart's story in a terminal, fast and without IPython."""

from __future__ import annotations

import subprocess
import sys
import time

SECTIONS = ("1. compile", "2. verify", "3. disassemble", "4. run with changing shapes", "5. step", "6. trace",
            "7. JIT")


def test_demo_tells_the_quickstart_story_quickly_without_ipython() -> None:
    code = ("import sys\nfrom msvm.cli import main\nrc = main(['demo'])\n"
            "assert 'IPython' not in sys.modules and 'msvm_widgets' not in sys.modules\nsys.exit(rc)")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for section in SECTIONS:
        assert section in out
    assert "func @block(x, h)" in out  # the disassembly
    assert "versions compiled: 1" in out  # one version for every shape
    assert "R2: float32[2, 3, 4, 8]" in out  # a stepped register
    assert "slice" in out  # the trace summary
    assert "hit rate" in out  # the JIT's cache table
    assert took < 10, f"the demo took {took:.1f} s"

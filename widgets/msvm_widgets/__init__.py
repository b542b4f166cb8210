"""msvm's Jupyter layer: the ``%%msvm`` magic and widgets that show registers, SCD, the JIT and traces.

Every widget works on its own from Python (``RegisterView(execution.registers)``,
``Dashboard.for_call(fn, x)``, ``JITMonitor()``) and carries a static text/html + text/plain fallback.
The core (``msvm``) never imports this package; ``%load_ext msvm`` does. Names are imported on first
use, so loading the extension neither waits for Plotly (whose first import takes seconds) nor imports
it in the background while the user's code runs: the first view that draws a figure imports it.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "CellProgress": "progress",
    "ClusterJITView": "cluster",
    "Dashboard": "dashboard",
    "Debugger": "debugger",
    "JITCacheView": "jitcache",
    "JITMonitor": "monitor",
    "RegisterView": "registers",
    "SCDView": "scd",
    "TraceTimeline": "timeline",
    "UpdatePump": "pump",
    "default_pump": "pump",
    "load_ipython_extension": "magics",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'msvm_widgets' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = sorted(_HOMES)

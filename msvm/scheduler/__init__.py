"""The Op-Scheduler: binds each OP_CALL to a kernel variant for its device, dtypes and shapes.

``dispatch`` decides (per call site, per input shapes), ``cost`` estimates, ``autotune`` measures,
``capability`` holds what the machine and its variants can do, ``patch`` edits that, validated,
``background`` calibrates the cost model off the execution thread and ``persist`` keeps the
results on disk for the next process.
"""

from .background import CALIBRATOR
from .capability import capability_db, dump_capability_db, reset_capability_db
from .dispatch import (
    Binding,
    Choice,
    Dispatcher,
    bind_kernel,
    bind_site,
    binding_settings,
    reset_dispatch_state,
)
from .patch import CapabilityPatchError, load_capability_patch


def wait_for_calibration(timeout: float | None = None) -> bool:
    """Block until the background calibration has nothing left to do; False if ``timeout`` (s) ran out.

    For benchmarks and tests that want calibrated decisions; user code never needs to wait.
    """
    return CALIBRATOR.wait(timeout)


__all__ = [
    "Binding",
    "CapabilityPatchError",
    "Choice",
    "Dispatcher",
    "bind_kernel",
    "bind_site",
    "binding_settings",
    "capability_db",
    "dump_capability_db",
    "load_capability_patch",
    "reset_capability_db",
    "reset_dispatch_state",
    "wait_for_calibration",
]

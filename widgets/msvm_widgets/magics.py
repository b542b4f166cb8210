"""``%load_ext msvm``: the ``%%msvm`` cell magic and the ``%msvm`` line commands.

Why a thin shell: compiling, verifying, running and observing are the core's; this module parses the
options, runs the cell (``cellrun``), turns msvm errors into a short message at the cell line or
bytecode address (``errors``), and displays the views.
"""

from __future__ import annotations

import contextlib
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from msvm import vm
from msvm.bytecode.text import assemble
from msvm.errors import MsvmError, VerifyError
from msvm.interpreter import Program
from msvm.observe.trace import TraceEvent
from msvm.options import CACHE_MODES, JitOptions
from msvm.verifier import check_module

from . import theme
from .calls import CallLog, collect_trace
from .cellrun import run_cell
from .errors import MsvmCellError, render_error
from .registers import HEADERS, register_names, register_row

LINE_USAGE = """%msvm info | monitor | trace on [DIR] | trace off | trace csv PATH | trace chrome PATH
      | scd FUNC ARGS... | reset"""


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--buckets takes comma-separated integers like 1,8,32, got {text!r}") from None


def split_args(text: str) -> list[str]:
    """Split ``%msvm scd`` arguments at spaces and commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and (ch.isspace() or ch == ","):
            if current:
                parts.append(current)
            current = ""
            continue
        current += ch
    if current:
        parts.append(current)
    return parts


def bundle(html_body: str, text: str, root_class: str) -> dict[str, str]:
    """A display bundle with themed HTML and its plain-text twin."""
    return {"text/html": theme.page(html_body, root_class), "text/plain": text}


@magics_class
class MsvmMagics(Magics):
    """``%%msvm`` runs a cell with its functions jitted; ``%msvm`` inspects and controls the VM and JIT."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.log = CallLog()
        self.cell_names: dict[str, str] = {}  # cell file name → "In[n]", for error locations

    # -- %%msvm -----------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("--trace", action="store_true", help="record a trace of the cell and show its timeline")
    @argument("--cache-mode", choices=CACHE_MODES, help="JIT cache mode of the cell's functions")
    @argument("--buckets", type=str, metavar="B1,B2,...",
              help="bucket boundaries, e.g. 1,8,32 (implies --cache-mode bucket)")
    @argument("--scd-threshold", type=float, metavar="X", help="SCD a region needs to be compiled (0..1)")
    @argument("--no-widgets", action="store_true", help="print a plain-text summary instead of the dashboard")
    @argument("--debug", action="store_true", help="open the step debugger on the cell's first msvm call")
    @argument("--asm", action="store_true",
              help="the cell is MS-BC text: assemble, verify and bind its functions as callables")
    @cell_magic("msvm")
    def msvm_cell(self, line: str, cell: str) -> Any:
        """Compile every top-level function of the cell with ms.jit, run the cell, show a dashboard.

        The dashboard shows the cell's last msvm call: registers, SCD, the timeline (with --trace), a
        step debugger, the JIT cache and monitor, and the bytecode. msvm errors show as a short message
        at the cell line (In[n]:line:col) or bytecode address; the cell is still marked as failed.
        Functions decorated with @ms.jit(...) in the cell keep their own options.
        """
        __tracebackhide__ = True
        args = parse_argstring(self.msvm_cell, line)
        filename = self._register_cell(cell)
        try:
            if args.asm:
                return self._asm_cell(cell, filename)
            return self._jit_cell(args, cell, filename)
        except MsvmError as exc:
            raise MsvmCellError(render_error(exc, self.cell_names)) from None

    def _register_cell(self, cell: str) -> str:
        count = self._cell_number(cell)
        filename = self.shell.compile.cache(cell, count)
        self.cell_names[filename] = f"In[{count}]"
        return filename

    def _cell_number(self, cell: str) -> int:
        """The running cell's n of In[n]. IPython 9 increments ``execution_count`` before running a
        cell and IPython 8 after; in both, the input history already ends with the running cell."""
        history = self.shell.history_manager.input_hist_raw if self.shell.history_manager else []
        if len(history) > 1 and cell.strip() and cell.strip() in history[-1]:
            return len(history) - 1
        return self.shell.execution_count  # not stored in the history (a silent run)

    def _options(self, args: Any) -> JitOptions:
        options: dict[str, Any] = {}
        if args.buckets is not None:
            options["bucket_boundaries"] = _int_list(args.buckets)
            options["cache_mode"] = "bucket"
        if args.cache_mode is not None:
            options["cache_mode"] = args.cache_mode
        if args.scd_threshold is not None:
            options["scd_threshold"] = args.scd_threshold
        try:
            return JitOptions(**options)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"%%msvm: {exc}") from None

    def _jit_cell(self, args: Any, cell: str, filename: str) -> Any:
        __tracebackhide__ = True
        options = self._options(args)
        self.log.clear()
        progress = None
        if not args.no_widgets:
            from .progress import CellProgress

            progress = CellProgress(self.log)  # live while the cell runs: calls, native share, compiles
            display(progress)
        failure = None
        try:
            with collect_trace() if args.trace else contextlib.nullcontext([]) as events:
                result = run_cell(self.shell, cell, filename, options, self.log)
        except BaseException as exc:
            failure = type(exc).__name__
            raise
        finally:
            if progress is not None:
                progress.finish(failure)
        self._show(args, result.functions, events)
        return result.value

    def _show(self, args: Any, functions: list[str], events: list[TraceEvent]) -> None:
        call = self.log.last
        if call is None:
            text = f"msvm: jitted {', '.join(functions) or 'no functions'}; no msvm call ran in this cell"
            display(bundle(theme.note(text), text, "msvm-cell-summary"), raw=True)
            return
        if args.no_widgets:
            execution = call.finished_execution()
            names = register_names(execution)
            table = theme.text_table(HEADERS, [register_row(r, names) for r in execution.registers])
            print(f"msvm: {call.describe()} ({self.log.count} msvm calls in this cell)\n{table}")
            return
        from .dashboard import Dashboard

        debug_call = self.log.first if args.debug else None
        display(Dashboard(call, events=events, calls=self.log.count, debug=args.debug, debug_call=debug_call))

    def _asm_cell(self, cell: str, filename: str) -> None:
        module = assemble(cell, filename=filename)
        diagnostics = check_module(module)
        if diagnostics:
            raise VerifyError(diagnostics)
        program = Program(module)
        bound = []
        for fn in module.functions:
            self.shell.user_ns[fn.name] = program.function(fn.name)
            bound.append(f"{fn.name}({', '.join(fn.params)}): {fn.size} instructions")
        text = f"assembled and verified module {module.name!r}; bound " + "; ".join(bound)
        display(bundle(theme.note(text), text, "msvm-asm-summary"), raw=True)

    # -- %msvm ------------------------------------------------------------------------------------------
    @line_magic("msvm")
    def msvm_line(self, line: str) -> Any:
        """%msvm info | monitor | trace on [DIR] | trace off | trace csv PATH | trace chrome PATH
              | scd FUNC ARGS... | reset

        info     the JIT cache table (select an entry for its bytecode, LLVM IR or assembly)
        monitor  the live JIT monitor: queue, active compiles with their phase, cache
        trace    record every executed instruction (to DIR/*.bclog, default ./ms_bc_trace), stop, or
                 export what was recorded as CSV or Chrome-trace JSON (opens in Perfetto)
        scd      the SCD analysis of FUNC on ARGS (Python expressions in the notebook's namespace)
        reset    empty the JIT cache and its statistics, and the in-memory trace
        """
        __tracebackhide__ = True
        words = line.split(None, 1)
        if not words:
            raise UsageError(f"usage: {LINE_USAGE}")
        command, rest = words[0], (words[1] if len(words) > 1 else "").strip()
        handlers = {"info": self._info, "monitor": self._monitor, "trace": self._trace, "scd": self._scd,
                    "reset": self._reset}
        if command not in handlers:
            raise UsageError(f"unknown %msvm command {command!r}; usage: {LINE_USAGE}")
        try:
            return handlers[command](rest)
        except MsvmError as exc:
            raise MsvmCellError(render_error(exc, self.cell_names)) from None

    def _info(self, rest: str) -> None:
        from .jitcache import JITCacheView

        display(JITCacheView(function=rest or None))

    def _monitor(self, _rest: str) -> None:
        from .monitor import JITMonitor

        display(JITMonitor())

    def _trace(self, rest: str) -> None:
        words = rest.split(None, 1)
        what, arg = (words[0] if words else ""), (words[1].strip() if len(words) > 1 else "")
        if what == "on":
            path = vm.enable_bc_trace(True, path=arg or "./ms_bc_trace")
            print(f"msvm: tracing every instruction to {path}")
        elif what == "off":
            vm.enable_bc_trace(False)
            print(f"msvm: tracing off ({len(vm.bc_trace_events())} events in memory)")
        elif what in ("csv", "chrome") and arg:
            export = vm.bc_trace_to_csv if what == "csv" else vm.bc_trace_to_chrome
            out = export(arg)
            print(f"msvm: wrote {out} ({len(vm.bc_trace_events())} events)")
        else:
            raise UsageError("usage: %msvm trace on [DIR] | off | csv PATH | chrome PATH")

    def _scd(self, rest: str) -> None:
        from .scd import SCDView

        parts = split_args(rest)
        if not parts:
            raise UsageError("usage: %msvm scd FUNC ARGS...")
        try:
            fn, *values = [self.shell.ev(p) for p in parts]
        except Exception as exc:
            raise UsageError(f"%msvm scd: cannot evaluate the arguments ({type(exc).__name__}: {exc})") \
                from None
        display(SCDView.for_call(fn, *values))

    def _reset(self, _rest: str) -> None:
        vm.reset()
        vm.clear_bc_trace()
        self.log.clear()
        print("msvm: reset the JIT cache, its statistics and the in-memory trace")


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (again on ``%reload_ext``, replacing the old ones). Nothing else runs:
    Plotly is imported by the first view that draws a figure, never while the user's code runs."""
    ipython.register_magics(MsvmMagics(ipython))

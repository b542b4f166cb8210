"""The look of every msvm view: one stylesheet on JupyterLab's ``--jp-*`` variables, tables as HTML and text.

Why one place: every widget renders the same rows twice, as themed HTML (live view and the static
``text/html`` fallback) and as a plain-text table (``text/plain``), so both must come from one helper.
The stylesheet sets its own foreground colour (JupyterLab's dark theme would otherwise swallow it),
falls back to light-theme colours where the ``--jp-*`` variables do not exist (nbconvert, GitHub),
highlights rows with translucent colours (legible on either theme) and lets wide tables scroll
instead of being clipped by the widget that holds them; figures in a view with the ``msvm-fit`` class
are as wide as the view (``fit.FitFigures`` redraws them at that width).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

STYLE = """<style>
.msvm-html { color: var(--jp-content-font-color1, #1f1f1f); background: transparent;
  font-family: var(--jp-code-font-family, monospace); font-size: var(--jp-code-font-size, 12px);
  line-height: 1.4; max-width: 100%; overflow-x: auto; }
.widget-html:has(.msvm-html) { max-width: 100%; min-width: 0; }
.widget-html:has(.msvm-html) > .widget-html-content { min-width: 0; line-height: normal; }
.msvm-fit .js-plotly-plot { width: 100%; min-width: 0; }
.msvm-html .msvm-title { font-family: var(--jp-ui-font-family, sans-serif); font-weight: 600;
  font-size: var(--jp-ui-font-size1, 13px); margin: 2px 0 4px 0; }
.msvm-html .msvm-note { color: var(--jp-content-font-color2, #555); font-family: var(--jp-ui-font-family,
  sans-serif); margin: 2px 0; }
.msvm-html table.msvm-table { border-collapse: collapse; margin: 2px 0 6px 0; }
.msvm-html table.msvm-table th { background: var(--jp-layout-color2, #eeeeee);
  color: var(--jp-content-font-color1, #1f1f1f); text-align: left; font-weight: 600; padding: 2px 8px;
  border-bottom: 1px solid var(--jp-border-color1, #bdbdbd); white-space: nowrap; }
.msvm-html table.msvm-table td { padding: 1px 8px; border-bottom: 1px solid var(--jp-border-color3, #e6e6e6);
  white-space: nowrap; vertical-align: top; }
.msvm-html tr.msvm-current td { background: rgba(255, 176, 0, 0.30); }
.msvm-html tr.msvm-written td { background: rgba(33, 150, 243, 0.25); }
.msvm-html tr.msvm-bad td, .msvm-html .msvm-bad { color: var(--jp-error-color1, #d32f2f); }
.msvm-html .msvm-good { color: var(--jp-success-color1, #2e7d32); }
.msvm-html .msvm-muted { color: var(--jp-content-font-color3, #8a8a8a); }
.msvm-html pre.msvm-code { background: var(--jp-layout-color2, #f5f5f5);
  color: var(--jp-content-font-color1, #1f1f1f); padding: 6px 8px; margin: 2px 0; max-height: 420px;
  overflow: auto; border: 1px solid var(--jp-border-color2, #e0e0e0); }
.msvm-html .msvm-error { border-left: 4px solid var(--jp-error-color1, #d32f2f); padding: 4px 10px;
  background: var(--jp-layout-color2, #fdecea); }
</style>"""


def esc(value: object) -> str:
    """HTML-escaped ``str(value)``; None shows as an empty cell."""
    return "" if value is None else html.escape(str(value))


def page(body: str, root_class: str) -> str:
    """A self-contained HTML fragment: the stylesheet plus ``body`` in a themed root element."""
    return f'{STYLE}<div class="msvm-html {root_class}">{body}</div>'


def title(text: str) -> str:
    return f'<div class="msvm-title">{esc(text)}</div>'


def note(text: str, css: str = "msvm-note") -> str:
    return f'<div class="{css}">{esc(text)}</div>'


def code_block(text: str) -> str:
    return f'<pre class="msvm-code">{esc(text)}</pre>'


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
               row_classes: Sequence[str] = ()) -> str:
    """A themed table; ``row_classes[i]`` (e.g. ``msvm-current``) styles row ``i``."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        css = row_classes[i] if i < len(row_classes) and row_classes[i] else ""
        cells = "".join(f"<td>{esc(c)}</td>" for c in row)
        body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    return f'<table class="msvm-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]], markers: Sequence[str] = ()) -> str:
    """The same table as plain text, columns padded; ``markers[i]`` prefixes row ``i`` (e.g. ``>``)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lead = max((len(m) for m in markers), default=0)
    lines = []
    for n, row in enumerate(cells):
        mark = (markers[n - 1] if 0 < n <= len(markers) else "").ljust(lead)
        text = "  ".join(c.ljust(w) for c, w in zip(row, widths))
        lines.append(((mark + " ") if lead else "") + text.rstrip())
    return "\n".join(lines)


def number(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, never in exponent form: 216, 21.6, 0.0216, 41,377."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    return f"{value:,.{decimals}f}"


def duration(ns: float) -> str:
    """A duration to 3 significant digits in the unit that reads best: ``850 ns``, ``41.4 µs``, ``216 ms``."""
    scale, unit = unit_of(ns)
    return f"{number(ns / scale)} {unit}"


def exact_duration(ns: int) -> str:
    """A duration to the nanosecond, in a readable unit: ``850 ns``, ``41.377218 ms``, ``1.000000002 s``."""
    scale, unit = unit_of(ns)
    decimals = len(str(int(scale))) - 1
    return f"{ns / scale:,.{decimals}f} {unit}"


UNITS = ((1, "ns"), (1_000, "µs"), (1_000_000, "ms"), (1_000_000_000, "s"))


def unit_of(ns: float) -> tuple[float, str]:
    """The largest unit in which ``ns`` is at least 1 (ns below 1 µs): (ns per unit, its symbol)."""
    chosen = UNITS[0]
    for scale, unit in UNITS:
        if abs(ns) >= scale:
            chosen = (scale, unit)
    return chosen


def cell_text(value: object, column: str = "") -> str:
    """A record field as table text: ``*_ms`` as durations, ``*_bytes`` in KiB/MiB, rates in %, other
    floats to 3 significant digits, dicts as ``k=v``, lists comma-joined."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell_text(v, column)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cell_text(v, column) for v in value) + "]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if column.endswith("_ms") or column == "ms":
        return duration(value * 1e6)
    if column.endswith("bytes"):
        return size(value)
    if column.endswith("rate"):
        return f"{number(value * 100)} %"
    return number(value) if isinstance(value, float) else str(value)


def size(nbytes: float) -> str:
    """``512 B``, ``12.3 KiB``, ``4.50 MiB``."""
    for unit in ("B", "KiB", "MiB"):
        if abs(nbytes) < 1024 or unit == "MiB":
            return f"{nbytes:.0f} B" if unit == "B" else f"{number(nbytes)} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def record_columns(records: Sequence[dict], wanted: Sequence[str]) -> list[str]:
    """The wanted columns that occur in at least one record, in the wanted order."""
    present = {key for record in records for key in record}
    return [c for c in wanted if c in present]


def record_rows(records: Sequence[dict], columns: Sequence[str]) -> list[list[str]]:
    return [[cell_text(record.get(c), c) for c in columns] for record in records]

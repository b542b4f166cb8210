"""FitFigures: keeps the Plotly figures of the view that holds it as wide as that view.

Why: a FigureWidget drawn while its tab is hidden has no width to measure and falls back to Plotly's
700 px, and under anywidget nothing resizes it later. Plotly's ``responsive`` config resizes a figure
on window resizes only; this helper, an invisible full-width element in the same view (the view
carries the ``msvm-fit`` class), observes its own width and that of each figure's holder, and asks
each figure of the view to fit again when one changes: a tab shown, a part of the view shown, a
sidebar folded, a window resized.
"""

from __future__ import annotations

import anywidget

FIT_CLASS = "msvm-fit"
RESPONSIVE = {"responsive": True, "displaylogo": False}  # the config every msvm figure is drawn with

_ESM = """
export default {
  render({ el }) {
    el.style.width = "100%";
    el.style.height = "0px";
    let frame = 0;
    const watched = new WeakSet();
    const observer = new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(fit);
    });
    function fit() {
      const host = el.closest(".FIT_CLASS");
      if (!host) return;
      for (const figure of host.querySelectorAll(".js-plotly-plot")) {
        // a figure's holder changes size when its part of the view is shown: watch it too
        const holder = figure.parentElement;
        if (holder && !watched.has(holder)) { watched.add(holder); observer.observe(holder); }
        if (typeof figure._responsiveChartHandler === "function") figure._responsiveChartHandler();
      }
    }
    observer.observe(el);
    return () => { cancelAnimationFrame(frame); observer.disconnect(); };
  },
};
""".replace("FIT_CLASS", FIT_CLASS)


class FitFigures(anywidget.AnyWidget):
    """Put one in a view with the ``msvm-fit`` class; its figures must use the ``RESPONSIVE`` config."""

    _esm = _ESM

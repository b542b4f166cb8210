"""The mime bundle of every msvm widget: the live view plus a static ``text/html`` and ``text/plain``.

Why: saved widget state is unreliable (JupyterLab stores it only when asked, and a restarted kernel
shows "model not found"), so nbconvert, GitHub, CI logs and a plain IPython terminal read the static
fallbacks instead. A widget mixes this in and implements ``static_html`` and ``static_text``.
"""

from __future__ import annotations

from typing import Any


class StaticFallback:
    """Mixin for ipywidgets: adds ``text/html`` and ``text/plain`` next to the widget-view mime type."""

    def static_html(self) -> str:
        raise NotImplementedError

    def static_text(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})  # type: ignore[misc]
        bundle["text/html"] = self.static_html()
        bundle["text/plain"] = self.static_text()
        return bundle

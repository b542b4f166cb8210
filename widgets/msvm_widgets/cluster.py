"""ClusterJITView: the JIT of every worker of a Dask cluster — entries, native hits, compiles, disk loads.

Why a snapshot with a refresh button and not a live poll: each refresh is a round trip to every worker
(``ms.distributed.cluster_jit_info``), which a poll would repeat while the map it watches runs; the
figures that matter (how many compiles per worker, how many keys came from the shared disk cache) are
read after or between maps.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from . import theme
from .fallback import StaticFallback

HEADERS = ("worker", "entries", "hits", "compiles", "disk loads")


class ClusterJITView(StaticFallback, widgets.VBox):
    """``ClusterJITView(client)``: one row per worker; ``refresh()`` (or its button) reads them again.

    ``info``: a ``cluster_jit_info`` result to show instead of asking the cluster (tests, saved runs).
    """

    def __init__(self, client: Any = None, *, info: dict[str, list[dict[str, Any]]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("msvm-cluster-jit")
        self.client = client
        self.table = widgets.HTML()
        button = widgets.Button(description="Refresh", tooltip="read every worker's jit_info() again")
        button.on_click(lambda _: self.refresh())
        self.children = [button, self.table]
        self.info: dict[str, list[dict[str, Any]]] = {}
        if info is not None:
            self.show(info)
        else:
            self.refresh()

    def refresh(self) -> None:
        """Ask every worker for its JIT entries."""
        from msvm.distributed import cluster_jit_info

        self.show(cluster_jit_info(self.client))

    def show(self, info: dict[str, list[dict[str, Any]]]) -> None:
        self.info = dict(info)
        self.table.value = self.static_html()

    def rows(self) -> list[list[object]]:
        from msvm.distributed import summary

        rows = []
        for worker, entries in sorted(self.info.items()):
            s = summary(entries)
            rows.append([worker, s["entries"], s["hits"], s["compiles"], s["disk_loads"]])
        return rows

    def static_html(self) -> str:
        body = theme.title(f"JIT across {len(self.info)} worker(s)")
        body += theme.html_table(HEADERS, self.rows()) if self.info else theme.note("no workers")
        return theme.page(body, "msvm-cluster-jit-table")

    def static_text(self) -> str:
        text = f"JIT across {len(self.info)} worker(s)"
        return text + ("\n" + theme.text_table(HEADERS, self.rows()) if self.info else "")

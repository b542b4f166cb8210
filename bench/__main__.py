"""``python -m bench [suite ...]``: run benchmark suites (all by default) and print their tables."""

from __future__ import annotations

import importlib
import sys

SUITES = ("interpreter", "ops_variants", "network", "codegen", "workloads", "delivery")


def main(argv: list[str]) -> int:
    names = argv or [s for s in SUITES if importlib.util.find_spec(f"bench.{s}") is not None]
    for name in names:
        if name not in SUITES:
            print(f"unknown suite {name!r}; suites: {', '.join(SUITES)}", file=sys.stderr)
            return 2
        print(f"\n## bench.{name}")
        importlib.import_module(f"bench.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

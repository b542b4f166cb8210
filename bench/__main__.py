"""``python -m bench [suite ...] [--options]``: run benchmark suites (all by default) and print their tables.

Options after the suite's name go to that suite (``python -m bench fuzz --cases 500 --seed 3``); the
exit status is the first nonzero one a suite returns (the fuzz campaign's when it found a defect).
"""

from __future__ import annotations

import importlib
import sys

SUITES = ("interpreter", "ops_variants", "network", "codegen", "workloads", "delivery", "fuzz", "onnx",
          "attention", "distributed")


def main(argv: list[str]) -> int:
    split = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, options = argv[:split], argv[split:]
    if options and len(names) != 1:
        print("options go to one suite: python -m bench SUITE [--options]", file=sys.stderr)
        return 2
    names = names or [s for s in SUITES if importlib.util.find_spec(f"bench.{s}") is not None]
    status = 0
    for name in names:
        if name not in SUITES:
            print(f"unknown suite {name!r}; suites: {', '.join(SUITES)}", file=sys.stderr)
            return 2
        print(f"\n## bench.{name}")
        module = importlib.import_module(f"bench.{name}")
        code = module.main(options) if options else module.main()
        status = status or (code if isinstance(code, int) else 0)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

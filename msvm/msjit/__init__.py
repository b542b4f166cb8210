"""MS-JIT: hot, shape-stable regions compiled to native code in the background.

``docs/architecture.md`` ("The JIT: a region is a standalone function" and the sections after it)
walks through the design.

The pieces, in the order data flows through them: ``scd`` (which dims are anchored, and why not),
``regions`` (region formation, a region as a standalone function, the SCD report), ``cache`` (cache
keys by mode, entries, budgets), ``compiler`` (the background thread and the crash-isolated compile
worker), ``runtime`` (region dispatch in the interpreter's generated code, hot-patching, and the
policy that keeps native code from ever being slower than the interpreter) and ``stats``
(``jit_info``, the monitor). ``codegen`` turns a region function into native code. Users reach all of
it through ``ms.vm``; nothing is imported here so that ``import msvm`` stays cheap.
"""

"""Native code for msvm: LLVM on this host, the crash-isolating compile worker, BLAS, a vector math library.

Shared by the kernel variants (``msvm.kernels``) and the JIT (``msvm.msjit``). Modules:
``llvm`` (initialisation, target machine, ``compile_ir``/``emit_object``/``load_object``),
``worker`` (``CompileWorker``: compiles in a subprocess), ``blas`` (?gemm entry points found at run
time, measured), ``blas_ir`` (calling them from generated code), ``mathlib`` (vectorisable
exp/log/tanh/erf/sigmoid as IR), ``irhelpers`` (loops and vector helpers for IR generators) and
``host`` (facts about this machine for the capability database).

Nothing is imported here: ``import msvm`` must not pay for llvmlite.
"""

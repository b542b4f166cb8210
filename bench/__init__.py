"""msvm benchmarks: ``python -m bench [suite ...]`` prints tables of medians and ratios.

Every suite measures its baselines (numpy, and torch/jax when installed) in the same run, so
ratios are comparable even on a shared, noisy machine; no absolute time is a claim on its own.
"""

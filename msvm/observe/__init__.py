"""Observability: trace events, JIT statistics and monitor feeds that tools and widgets read."""

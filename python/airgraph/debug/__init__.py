"""Debugging and accuracy tools.

- airgraph.debug.compare(model, *inputs): eager vs engine, node by node; reports
  the first FX node whose engine output diverges beyond tolerance, and which
  pass, when switched off, makes the divergence go away.
- airgraph.debug.compare_dumps(dir_a, dir_b): the same from two data dumps
  (also `python -m airgraph.debug compare DIR_A DIR_B`).
- airgraph.debug.profile(model, *inputs): per-node time table and a Chrome
  trace (opens in Perfetto / chrome://tracing).
Graph dumps, data dumps and run_eagerly are CompilerConfig switches (see config.py).
"""
from .compare import CompareReport, compare, compare_dumps
from .profile import ProfileReport, profile

__all__ = ["CompareReport", "ProfileReport", "compare", "compare_dumps", "profile"]

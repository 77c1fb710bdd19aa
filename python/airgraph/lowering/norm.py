"""Lowerings: norm ops (see lowering/__init__.py for the API)."""
from . import Unsupported, aten, lowering  # noqa: F401

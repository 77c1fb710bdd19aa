"""airgraph: a graph-mode backend for torch.compile with a C++ compiler and runtime.

    import torch, airgraph
    model = torch.compile(model, backend="airgraph")
    model = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(...)))
"""
import logging as _logging
import os as _os

from ._core import C as _C, EngineError
from .backend import airgraph_backend, get_backend
from .config import CompilerConfig
from .explain import ExplainReport, explain

__version__ = "0.1.0"


def ops() -> list[str]:
    """Engine ops the C++ core registers."""
    return list(_C.ops())


def pass_names() -> list[str]:
    return list(_C.pass_names())


__all__ = ["CompilerConfig", "EngineError", "ExplainReport", "airgraph_backend", "explain", "get_backend", "ops",
           "pass_names"]


def _register_name():
    # The entry point makes backend="airgraph" work without this import; this
    # covers running from a source tree that pip never installed.
    try:
        from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

        if "airgraph" not in _COMPILER_FNS:
            register_backend(airgraph_backend, name="airgraph")
    except Exception:  # pragma: no cover - registry internals moved
        pass


_register_name()


def _setup_logging():
    """AIRGRAPH_LOG_LEVEL=DEBUG|INFO|WARNING sets the level of the "airgraph" logger."""
    level = _os.environ.get("AIRGRAPH_LOG_LEVEL")
    logger = _logging.getLogger("airgraph")
    if level:
        logger.setLevel(level.upper())
        if not logger.handlers:
            h = _logging.StreamHandler()
            h.setFormatter(_logging.Formatter("[airgraph %(levelname)s] %(message)s"))
            logger.addHandler(h)


_setup_logging()
from . import debug  # noqa: E402,F401

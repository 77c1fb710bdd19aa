"""airgraph: a graph-mode backend for torch.compile with a C++ compiler and runtime.

    import torch, airgraph
    model = torch.compile(model, backend="airgraph")
    model = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(...)))
"""
import logging as _logging
import os as _os

from ._core import C as _C, EngineError
from ._version import __version__
from .backend import airgraph_backend, get_backend, set_dim_gears
from .config import CompilerConfig
from .explain import ExplainReport, explain
from .cache import cache_info, clear_cache
from .cache_compile import CacheCompiled, cache_compile
from .export import LoadedModel, export, load
from .custom_ops import Builder, Decline, LoweringError, Value, cmake_dir, include_dir, load_library, register_lowering


def ops() -> list[str]:
    """Engine ops the C++ core registers."""
    return list(_C.ops())


def pass_names() -> list[str]:
    return list(_C.pass_names())


def empty_cache() -> dict:
    """Frees the blocks the engine keeps for the outputs of later calls (a graph's outputs of 1 MiB
    and more are reused from a process-wide cache of at most AIRGRAPH_OUTPUT_CACHE_MB, default 512,
    plus the last block larger than that by itself, once the caller lets them go); returns the
    cache's counters as they were before."""
    stats = dict(_C.output_cache_stats())
    _C.release_output_cache()
    return stats


__all__ = ["Builder", "CacheCompiled", "CompilerConfig", "Decline", "EngineError", "LoweringError", "Value", "ExplainReport", "LoadedModel", "airgraph_backend", "cache_compile", "cache_info",
           "clear_cache", "cmake_dir", "empty_cache", "explain", "export", "get_backend", "include_dir", "load", "load_library", "ops", "pass_names", "register_lowering", "set_dim_gears"]


def _register_name():
    """Makes backend="airgraph" resolvable when airgraph was imported from a tree
    pip never installed (PYTHONPATH=python), without ever registering the name twice.

    Dynamo resolves a name lazily: lookup_backend("airgraph") reads the
    `torch_dynamo_backends` entry points into `_BACKENDS`, loads ours (which imports
    this package, so this function runs *during* that load) and then calls
    register_backend itself; had we registered the compiler function here, that
    second call would raise "duplicate name: airgraph". So this only ever declares
    the same entry point (name -> "airgraph.backend:airgraph_backend") in `_BACKENDS`
    when nothing is there yet, and leaves `_COMPILER_FNS` to Dynamo: one
    registration, whichever of (installed entry point, import first, source tree)
    came first.
    """
    try:
        from importlib.metadata import EntryPoint

        from torch._dynamo.backends import registry  # (torch internals that may move: see the except)
    except Exception:  # pragma: no cover - registry moved: the installed entry point still works
        return
    backends, compiled = getattr(registry, "_BACKENDS", None), getattr(registry, "_COMPILER_FNS", None)
    if not isinstance(backends, dict) or not isinstance(compiled, dict):  # pragma: no cover
        return
    if "airgraph" in backends or "airgraph" in compiled:
        return
    backends["airgraph"] = EntryPoint(name="airgraph", value="airgraph.backend:airgraph_backend",
                                      group="torch_dynamo_backends")


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

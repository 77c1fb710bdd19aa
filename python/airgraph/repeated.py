"""Repeated blocks marked for tracing (CompilerConfig.repeated_blocks, used by airgraph.cache_compile).

A model's N identical layers (an nn.ModuleList of one class) are traced N times by Dynamo and by
AOTAutograd. `torch.compiler.nested_compile_region` makes Dynamo trace such a block once and call
it through the `invoke_subgraph` higher-order op; airgraph's backend inlines those calls again before
lowering (subgraphs.py), so the engine graph is the one the unmarked model gives. cache_compile
controls the trace, so it can mark the layers itself while Dynamo traces, and only then:

    with marked_blocks(model) as classes:   # each ModuleList of >= 2 modules of one class
        ...Dynamo traces model.forward...    # the layer class's forward is marked (marked_forward)
    # restored: the class's own forward again

What is marked: the children of every nn.ModuleList under the module (not the module itself) that
are at least two modules of one class, with a plain Python `forward` the class defines itself and
no instance `forward` of their own (an instance forward set by the user or a hook library is left
alone). The class's forward is swapped for the duration of the trace, not each instance's: an
instance-level marking (types.MethodType(marked, layer)) makes torch 2.13's Dynamo stamp out the
later layers of plain nn.Modules with the first layer's weights (a wrong result, backend="eager"
too). Outside Dynamo the marked forward runs as the class's own (nested_compile_region is a no-op
in eager), so other instances and threads that call it meanwhile see no difference.

Not marked: a call that is handed a KV cache (a non-None argument named like past_key_value(s),
layer_past, cache, kv_cache or cache_position). A DynamicCache's update is a Python side effect
inside the block, which Dynamo cannot keep inside a region: it breaks the graph there (a Qwen2
decoder's generate() broke into 17 graphs and took 76 s instead of 43 s). Decided per call, while
tracing, so that a layer class that takes an optional cache (transformers' BERT and RoBERTa layers
take `cache`, always None in an encoder) is marked when it gets none. If a marked trace breaks the
graph anyway, cache_compile's later calls trace unmarked (the call itself is not run again: its side
effects have happened); if Dynamo fails on the marked blocks, the call is traced again unmarked at
once (see cache_compile.CacheCompiled._trace).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import types

import torch

log = logging.getLogger("airgraph")

# parameter names that hand a block a KV cache (a Python object it updates: a side effect)
CACHE_PARAMS = ("past_key_value", "past_key_values", "layer_past", "cache", "kv_cache", "cache_position",
                "layer_cache", "past_key_values_length")
_CACHE_WORDS = ("past_key", "layer_past", "cache")

_DISPATCH: dict[type, object] = {}  # class -> its shared marked forward (one region per class)
_LOCK = threading.RLock()


def _is_cache_param(name: str) -> bool:
    return name in CACHE_PARAMS or (name != "use_cache" and any(w in name for w in _CACHE_WORDS))


def marked_forward(cls: type):
    """The forward shared by every marked instance of `cls`: the class's forward as a
    nested_compile_region, except for calls handed a KV cache (run unmarked); None when the class's
    forward cannot be marked (no plain Python function)."""
    f = _DISPATCH.get(cls, _LOCK)  # (no lock on the way that finds it: marked_blocks holds it while tracing)
    if f is not _LOCK:
        return f
    with _LOCK:
        if cls in _DISPATCH:
            return _DISPATCH[cls]
        fwd = inspect.getattr_static(cls, "forward", None)
        if not isinstance(fwd, types.FunctionType) or getattr(fwd, "__marked_compile_region_fn__", None) is not None \
                or hasattr(fwd, "_torchdynamo_inline"):
            _DISPATCH[cls] = None
            return None
        region = torch.compiler.nested_compile_region(fwd)
        try:
            params = list(inspect.signature(fwd).parameters.values())[1:]  # (after self)
        except (TypeError, ValueError):
            _DISPATCH[cls] = None
            return None
        positional = tuple(i for i, p in enumerate(params) if _is_cache_param(p.name) and p.kind in
                           (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
        named = tuple(p.name for p in params if _is_cache_param(p.name) and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            named = tuple(dict.fromkeys(named + CACHE_PARAMS))

        def forward(self, *args, **kwargs):
            for i in positional:
                if i < len(args) and args[i] is not None:
                    return fwd(self, *args, **kwargs)
            for k in named:
                if kwargs.get(k) is not None:
                    return fwd(self, *args, **kwargs)
            return region(self, *args, **kwargs)

        forward.__name__, forward.__qualname__ = fwd.__name__, fwd.__qualname__
        forward.__module__, forward.__doc__ = fwd.__module__, fwd.__doc__
        forward._airgraph_marked = True
        forward.__wrapped__ = fwd
        _DISPATCH[cls] = forward
        return forward


def is_marked(module) -> bool:
    """Whether `module`'s forward is the marked one (its class's, swapped by marked_blocks)."""
    f = inspect.getattr_static(type(module), "forward", None) if isinstance(module, torch.nn.Module) else None
    return getattr(f, "_airgraph_marked", False) and "forward" not in vars(module)


def bound_marked_forward(module):
    """marked_forward of `module`'s class bound to it, whether marked now or not (cache_compile's
    saved guards read a marked block's forward through this: the marking is gone when they run)."""
    f = marked_forward(type(module))
    if f is None:
        raise TypeError(f"{type(module).__qualname__}'s forward cannot be marked")
    return f.__get__(module)


def repeated_blocks(module) -> list[list[torch.nn.Module]]:
    """The lists of modules to mark under `module`: each nn.ModuleList's children that are >= 2
    modules of one class whose forward can be marked, and have no forward of their own."""
    if not isinstance(module, torch.nn.Module):
        return []
    out = []
    for m in module.modules():
        if not isinstance(m, torch.nn.ModuleList):
            continue
        children = [c for c in m if c is not None]
        if len(children) < 2 or len({type(c) for c in children}) != 1:
            continue
        if any("forward" in vars(c) for c in children) or marked_forward(type(children[0])) is None:
            continue
        out.append(children)
    return out


@contextlib.contextmanager
def marked_blocks(module):
    """Marks the repeated blocks under `module` (see the module text) for the duration of the block
    and restores them afterwards; yields the classes marked (an empty list: nothing to mark).

    The class's forward is replaced while Dynamo traces, not each instance's: an instance-level
    marking (types.MethodType(marked, layer) as the layer's `forward`) makes torch 2.13's Dynamo
    stamp out later calls of the region with the first layer's parameters for plain nn.Modules (a
    wrong result even with backend="eager"; transformers' GradientCheckpointingLayer happens to be
    spared). Other instances of the class see the marked forward meanwhile, which runs exactly as
    the class's own outside Dynamo (nested_compile_region is a no-op in eager)."""
    classes = []
    with _LOCK:
        try:
            for group in repeated_blocks(module):
                cls = type(group[0])
                if cls in classes:
                    continue
                fwd = marked_forward(cls)
                if vars(cls).get("forward") is not fwd.__wrapped__:
                    continue  # (forward inherited: the class itself defines none to swap)
                cls.forward = fwd
                classes.append(cls)
            yield classes
        finally:
            for cls in classes:
                cls.forward = cls.forward.__wrapped__

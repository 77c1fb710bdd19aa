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

Calls handed a KV cache (a non-None argument named like past_key_value(s), layer_past, cache,
kv_cache or cache_position that is not a tensor or an int): a cache's update is a Python side effect
inside the block, which Dynamo cannot keep inside a region (it broke a Qwen2 decoder's generate()
into 17 graphs, 76 s instead of 43 s). So a block handed a transformers DynamicCache runs in the
region on a stand-in for its own cache layer (FunctionalKV, at the layer index of the block's
attention): that layer's keys and values go into the region as tensors, the stand-in updates them
as DynamicLayer.update does (torch.cat), and they come back out as outputs, which the marked forward
puts into the cache outside the region. The prefill (layers not initialized) and the decode steps
are each traced once for all layers. Any other cache (StaticCache, sliding-window or quantized
layers, offloading, several cache arguments, a layer that shares another's cache, a block whose
submodules hold two layer indices) runs its call unmarked; a block that asks the stand-in for
anything but its update raises StandInError, and cache_compile puts the cache back as it was (its
layers replace their tensors, never write into them) and traces the call again unmarked. Decided per call, while tracing, so that a layer class
that takes an optional cache (transformers' BERT and RoBERTa layers take `cache`, None in an
encoder) is marked when it gets none. If a marked trace breaks the graph anyway, cache_compile's
later calls trace unmarked (the call itself is not run again: its side effects have happened); if
Dynamo fails on the marked blocks, the call is traced again unmarked at once (see
cache_compile.CacheCompiled._trace).

transformers wraps attention classes' forward in the `kernels` library's `use_kernelized_func`
wrapper, which under torch.compile keeps a context variable in a global (set and reset): a side effect
that stops Dynamo from reusing a block's trace for the next layer. Where no instance was kernelized
that wrapper only calls the plain forward, so it is taken off while the blocks are marked.
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


class StandInError(RuntimeError):
    """A marked block asked its stand-in cache for something only the whole cache has."""


class FunctionalKV:
    """What a marked block is handed in place of its transformers DynamicCache: its own layer's keys
    and values (None before the first update), updated as DynamicLayer.update does, by concatenation.
    Anything else a block asks of its cache (its length, other layers) raises StandInError, and
    cache_compile then puts the cache back as it was and traces the call again unmarked. The layer
    index the block passes to update is not compared with its attention's (kv_index): a check would
    make Dynamo guard each layer's region on its index, and no region could serve the next layer."""

    def __init__(self, keys, values):
        self.keys, self.values = keys, values

    def __getattr__(self, name):  # (only for what the class does not define)
        raise StandInError(f"a marked block asked its cache for {name!r}, which airgraph's stand-in for "
                           "one layer of a DynamicCache does not have")

    def update(self, key_states, value_states, *args, **kwargs):
        if self.keys is None:
            # DynamicLayer's lazy start (torch.cat of an empty tensor and the states) makes new tensors:
            # so do these copies (GPT-2's keys and values are views of one tensor, and a region's
            # outputs must not alias each other)
            self.keys, self.values = key_states.clone(), value_states.clone()
        else:
            self.keys = torch.cat([self.keys, key_states], dim=-2)
            self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values


_ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")


def kv_index(block):
    """The layer index a block's attention updates its cache at (transformers' `layer_idx` on the
    block's attention module), or None: no such attention, or one that shares another layer's
    cache (Gemma3n's `is_kv_shared_layer`), which a stand-in cache for one layer cannot serve."""
    for name in _ATTENTION_NAMES:
        attn = getattr(block, name, None)
        if isinstance(attn, torch.nn.Module):
            idx = getattr(attn, "layer_idx", None)
            if type(idx) is not int or getattr(attn, "is_kv_shared_layer", False) \
                    or getattr(attn, "kv_shared_layer_index", None) is not None:
                return None
            return idx
    return None


_KV_ONE_LAYER: dict[type, bool] = {}  # class -> every marked block of it holds one cache layer index (marked_blocks)


def _one_cache_layer(block) -> bool:
    """Whether every `layer_idx` in the block (its attention's and any other submodule's) is the one
    kv_index gives: a block with two cache layers (two attentions updating different indices) cannot
    be served by a stand-in for one layer, and would be served wrongly without this check."""
    idx = kv_index(block)
    return idx is None or all(getattr(m, "layer_idx", idx) == idx for m in block.modules()
                              if type(getattr(m, "layer_idx", None)) is int)


def _dynamic_layers(cache):
    """A transformers DynamicCache's plain DynamicLayers (the ones kv regions serve), else ()."""
    if not _dynamic_cache(cache):
        return ()
    return tuple(layer for layer in getattr(cache, "layers", ()) if _dynamic_layer(layer))


def cache_snapshot(args, kwargs):
    """The state of the DynamicCaches among a call's arguments, and a function that puts it back.
    Their layers replace their tensors on update (torch.cat, slicing: nothing in place), so a shallow
    copy of each layer's attributes (and of the list of layers, which an update can extend) is enough
    to undo a call that failed half-way."""
    caches = [(v, list(v.layers)) for v in (*args, *kwargs.values()) if _dynamic_cache(v)
              and isinstance(getattr(v, "layers", None), list)]
    saved = [(layer, dict(vars(layer))) for _, layers in caches for layer in layers]

    def restore():
        for cache, layers in caches:
            cache.layers[:] = layers
        for layer, state in saved:
            vars(layer).clear()
            vars(layer).update(state)
    return caches, restore


def _is_transformers(obj, name: str) -> bool:  # (exactly that class: no subclass, no import of transformers)
    t = type(obj)
    return t.__name__ == name and t.__module__ == "transformers.cache_utils"


def _dynamic_cache(cache) -> bool:
    return _is_transformers(cache, "DynamicCache")


def _dynamic_layer(layer) -> bool:
    return _is_transformers(layer, "DynamicLayer")


def pin_cache_heads(args, kwargs) -> bool:
    """Marks the head and head-dim sizes of a DynamicCache's keys and values (dims 1 and 3 of
    [batch, heads, length, head_dim]: the model's constants) static for the next trace; True if
    there were any. With every size symbolic (dynamic=True), a marked block's trace finds the head
    count equal to its attention's constant and replaces that symbol by the number, and Dynamo's
    stamping out of the next layer's call then fails on the symbol it lifted (torch 2.13: KeyError in
    stamp_out_subgraph). The caller then traces with duck sizing, so that every layer's cache length
    is one symbol: with a symbol per layer, no layer's region could serve the next."""
    pinned = False
    for v in (*args, *kwargs.values()):
        for layer in _dynamic_layers(v):
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(t, torch.Tensor) and t.dim() == 4:
                    torch._dynamo.mark_static(t, 1)
                    torch._dynamo.mark_static(t, 3)
                    pinned = True
    return pinned


def marked_forward(cls: type):
    """The forward shared by every marked instance of `cls`: the class's forward as a
    nested_compile_region, calls handed a DynamicCache through its stand-in (FunctionalKV), other
    caches unmarked; None when the class's forward cannot be marked (no plain Python function)."""
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

        def kv_body(self, past_k, past_v, slot, args, kwargs):
            # the block run on a stand-in for its cache layer, made here: its update is the
            # DynamicLayer's, on tensors in and out of the region (no side effect outside it)
            stand = FunctionalKV_(past_k, past_v)
            if isinstance(slot, int):
                args = args[:slot] + (stand,) + args[slot + 1:]
            else:
                kwargs = {**kwargs, slot: stand}
            return fwd(self, *args, **kwargs), stand.keys, stand.values

        kv_region = torch.compiler.nested_compile_region(kv_body)
        FunctionalKV_, kv_index_, data_types = FunctionalKV, kv_index, (torch.Tensor, int)  # (closures, not globals)
        dynamic_cache, dynamic_layer, kv_one_layer = _dynamic_cache, _dynamic_layer, _KV_ONE_LAYER

        def with_cache(self, cache, slot, args, kwargs):
            # a transformers DynamicCache of plain DynamicLayers, and the block's attention's own
            # layer index (see kv_index): the layer's keys and values go through the region as tensors
            idx = kv_index_(self)
            if idx is None or not kv_one_layer.get(type(self), False) or not dynamic_cache(cache) \
                    or getattr(cache, "offloading", True) or idx >= len(cache.layers) \
                    or not dynamic_layer(cache.layers[idx]):
                return fwd(self, *args, **kwargs)
            layer = cache.layers[idx]
            # (the cache itself does not enter the region: the stand-in takes its place in there)
            if isinstance(slot, int):
                args = args[:slot] + (None,) + args[slot + 1:]
            else:
                kwargs = {**kwargs, slot: None}
            if layer.is_initialized and layer.keys is not None and layer.keys.numel():
                out, k, v = kv_region(self, layer.keys, layer.values, slot, args, kwargs)
            else:
                out, k, v = kv_region(self, None, None, slot, args, kwargs)
                if not layer.is_initialized:
                    layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
            return out

        def forward(self, *args, **kwargs):
            found = None
            for i in positional:
                if i < len(args) and args[i] is not None and not isinstance(args[i], data_types):
                    if found is not None:
                        return fwd(self, *args, **kwargs)
                    found = i
            for k in named:
                v = kwargs.get(k)
                if v is not None and not isinstance(v, data_types):
                    if found is not None:
                        return fwd(self, *args, **kwargs)
                    found = k
            if found is None:
                return region(self, *args, **kwargs)
            return with_cache(self, args[found] if isinstance(found, int) else kwargs[found], found, args, kwargs)

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


_KERNEL_WRAPPERS: dict[type, object] = {}  # class -> the kernels library's forward wrapper taken off it


def _is_kernel_wrapper(f) -> bool:
    code = getattr(f, "__code__", None)
    return code is not None and code.co_name == "new_forward" and hasattr(f, "__wrapped__") \
        and code.co_filename.replace("\\", "/").endswith("kernels/_internals/layer/layer.py")


def _kernel_wrapped(module, classes) -> list[type]:
    """The classes inside the marked blocks whose forward is the `kernels` library's
    `use_kernelized_func` wrapper (transformers' attention classes) where no instance was kernelized.
    That wrapper routes a kernelized function through a context variable, which under torch.compile
    it keeps in a global: a side effect, though set back at once, that stops Dynamo from reusing a
    traced block for the next layer. Not kernelized, it calls the function itself, so the wrapped
    forward is taken off while the blocks are marked (and put back after)."""
    found: dict[type, bool] = {}
    for m in module.modules():
        if not isinstance(m, tuple(classes)):
            continue
        for sub in m.modules():
            c = type(sub)
            f = vars(c).get("forward")
            if not _is_kernel_wrapper(f):
                continue
            plain = all("forward" not in vars(k) for k in vars(sub).get("_kernel_funcs", {}).values())
            found[c] = found.get(c, True) and plain
    out = [c for c, plain in found.items() if plain]
    for c in out:
        _KERNEL_WRAPPERS[c] = vars(c)["forward"]
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
    classes, unwrapped, seen_kv = [], [], set()
    with _LOCK:
        try:
            groups = repeated_blocks(module)
            for group in groups:
                cls = type(group[0])
                if cls in classes:
                    continue
                fwd = marked_forward(cls)
                if vars(cls).get("forward") is not fwd.__wrapped__:
                    continue  # (forward inherited: the class itself defines none to swap)
                cls.forward = fwd
                classes.append(cls)
            for group in groups if classes else ():
                cls = type(group[0])
                ok = all(_one_cache_layer(b) for b in group)
                _KV_ONE_LAYER[cls] = ok and (_KV_ONE_LAYER[cls] if cls in seen_kv else True)
                seen_kv.add(cls)
            if classes:
                for c in _kernel_wrapped(module, classes):
                    c.forward = vars(c)["forward"].__wrapped__
                    unwrapped.append(c)
            yield classes
        finally:
            for cls in classes:
                cls.forward = cls.forward.__wrapped__
            for c in unwrapped:
                c.forward = _KERNEL_WRAPPERS[c]

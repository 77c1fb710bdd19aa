"""airgraph.cache_compile: saved graphs that skip Dynamo's tracing and its guards (TorchAir's
cache_compile, made safe).

    model.forward = airgraph.cache_compile(model.forward)          # or @airgraph.cache_compile(...)
    model.generate(input_ids, ...)                                 # traces once, then replays

The first call of a new input signature runs torch.compile (airgraph's backend, symbolic sizes)
and records what Dynamo made of the function's frame: its transformed bytecode (how the Python
inputs are flattened into the graph's arguments, how the outputs are rebuilt, and every Python side
effect of the traced code: a DynamicCache's tensors set, lists grown), the compiled graph(s) as saved
engine graphs (saved_graph.py), and Dynamo's guards, translated into checks that need no Dynamo. The
entry is written to the cache folder. Later calls, in this process or a new one, run that bytecode
directly, with the saved engine graph in place of Dynamo's compiled function: no tracing, no Dynamo
guard evaluation, no AOTAutograd wrapper.

What is checked instead of trusted:
- on every call: the arguments' structure and the values the trace read from them (Dynamo's guards
  on them, translated), every input tensor's dtype, device, rank, sizes and strides (symbolic dims
  free, within the size relations Dynamo recorded), torch's global state (grad mode, default dtype,
  threads, ...), and the weights (identity and version, as torch.compile's airgraph graphs do);
- on every call too: the module's config values and attributes the trace read (a submodule's own
  plain attributes, such as a norm's eps, are read again when its __dict__ was written: one version
  read per module), and, cheaply, the lengths of the module tree's hook dicts and the identity of its
  submodules (a hook added or a submodule replaced binds again);
- when an entry is bound (its first call in a process, or after such a change): the module's
  classes and hooks, and the globals and functions the traced code used (by name, and by their code);
- when an entry is loaded: the airgraph, torch, transformers and Python versions, the CPU features,
  and the source files of every code object Dynamo traced (an edited model file makes a new entry).
A mismatch traces again (a new entry); a damaged or foreign file is rebuilt with a warning. Where a
frame cannot be saved (a graph break, PyTorch fallback nodes, random ops, a guard that names an
object no other process can find) the function keeps running through torch.compile, with a log line
saying why.
"""
from __future__ import annotations

import ast
import builtins
import collections
import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib
import logging
import marshal
import os
import pickle
import re
import sys
import tempfile
import threading
import time
import types

import torch
import torch._dynamo
from torch._dynamo import guards as _dynamo_guards
from torch._dynamo import utils as _dynamo_utils
from torch.fx.experimental import _config as _shapes_config

try:  # (whether Dynamo's eval-frame callback is set: CacheCompiled.__call__ picks the replay by it)
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as _eval_frame_callback
except ImportError:  # another torch: every replay goes through torch._dynamo.disable
    def _eval_frame_callback():
        return True

from . import backend as _backend
from . import cache as _cache
from ._version import __version__
from .config import CompilerConfig
from .graph_types import InputMismatch, phases_text, sum_phases
from .repeated import StandInError, bound_marked_forward, cache_snapshot, is_marked, marked_blocks, pin_cache_heads
from .saved_graph import SavedGraph, artifact

log = logging.getLogger("airgraph")

FORMAT, FORMAT_VERSION = "airgraph-cache-compile", 1
MAX_ENTRIES = 16  # entries kept per function on disk (the newest)
_MARK = "__airgraph_const__"
_STATE_GUARDS = ("GRAD_MODE", "DETERMINISTIC_ALGORITHMS", "GLOBAL_STATE", "TORCH_FUNCTION_STATE",
                 "AUTOGRAD_SAVED_TENSORS_HOOKS", "DEFAULT_DEVICE")


class Unsaveable(Exception):
    """Why a traced frame cannot be kept as a saved entry."""


# ----------------------------------------------------------------------------- code objects and names


def _dump_code(code: types.CodeType) -> tuple[bytes, bytes]:
    """marshal of a code object whose constants marshal cannot write (a torch.device) are stood in
    for by markers, and the pickle of those constants."""
    extras = []

    def strip(c):
        consts = []
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                consts.append(strip(k))
                continue
            try:
                marshal.dumps(k)
                consts.append(k)
            except ValueError:
                extras.append(k)
                consts.append((_MARK, len(extras) - 1))
        return c.replace(co_consts=tuple(consts))

    data = marshal.dumps(strip(code))
    try:
        return data, pickle.dumps(extras)
    except Exception as e:
        raise Unsaveable(f"the transformed bytecode holds a constant that cannot be saved ({e})") from None


def _load_code(data: bytes, extras: bytes) -> types.CodeType:
    objs = pickle.loads(extras)

    def put(c):
        consts = []
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                consts.append(put(k))
            elif type(k) is tuple and len(k) == 2 and k[0] == _MARK:
                consts.append(objs[k[1]])
            else:
                consts.append(k)
        return c.replace(co_consts=tuple(consts))

    return put(marshal.loads(data))


def _resolve(ref):
    """The object a reference made by _ref names, in this process."""
    kind = ref[0]
    if kind == "c":
        return ref[1]
    if kind == "m":
        return importlib.import_module(ref[1])
    if kind == "b":
        return builtins.__dict__
    if kind == "q":
        obj = importlib.import_module(ref[1])
        for part in ref[2].split("."):
            obj = getattr(obj, part)
        return obj
    if kind == "e":
        return getattr(_resolve(ref[1]), ref[2])
    if kind == "code":
        return _load_code(ref[1], ref[2])
    if kind == "inst":  # an object of a local class (_instance_ref), compared by ___same_instance
        return _load_desc(ref)
    if kind == "lc":  # a local class's description (_local_class_ref), compared by ___local_class
        return ("lc", ref[1], ref[2], [_resolve(b) for b in ref[3]], [(k, _load_desc(d)) for k, d in ref[4]])
    raise ValueError(f"unknown reference {ref!r}")


def _ref(obj):
    """A reference to `obj` another process can resolve to the same object (by name), or None."""
    if obj is None or obj is True or obj is False or obj is Ellipsis:
        return ("c", obj)
    if isinstance(obj, types.ModuleType):
        return ("m", obj.__name__)
    if obj is builtins.__dict__:
        return ("b",)
    if isinstance(obj, enum.Enum):
        r = _ref(type(obj))
        return ("e", r, obj.name) if r is not None else None
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if mod is None and hasattr(obj, "__objclass__"):  # a method descriptor (dict.keys)
        owner = _ref(obj.__objclass__)
        if owner is not None and owner[0] == "q":
            mod, qual = owner[1], owner[2] + "." + obj.__name__
    if isinstance(obj, type) and obj.__module__ == "builtins":  # (types.MethodType is builtins.method)
        for k, v in vars(types).items():
            if v is obj:
                return ("q", "types", k)
    name = getattr(obj, "__name__", None)
    for q in (qual, name):  # (torch.cat's qualname is _VariableFunctionsClass.cat; torch.cat is its name)
        if isinstance(mod, str) and isinstance(q, str) and "<locals>" not in q:
            try:
                if _resolve(("q", mod, q)) is obj:
                    return ("q", mod, q)
            except Exception:
                pass
    return None


_CLASS_BOOKKEEPING = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__firstlineno__",
                      "__static_attributes__", "__annotations__"}


def _describe(x):
    """A value of a local class (an attribute, a closure cell) by value: a constant, a name, a
    function (its code and its closure's contents, described alike) or a static/class method of one;
    None when it is none of these."""
    if _constant(x):
        return ("const", x)
    r = _ref(x)
    if r is not None:
        return ("ref", r)
    if type(x) in (dict, list, tuple, set, collections.OrderedDict) and len(x) == 0:
        return ("empty", _ref(type(x)))
    if isinstance(x, (staticmethod, classmethod)):
        inner = _describe(x.__func__)
        return None if inner is None else ("wrap", type(x).__name__, inner)
    if isinstance(x, types.FunctionType):
        cells = []
        for c in x.__closure__ or ():
            try:
                d = _describe(c.cell_contents) if c.cell_contents is not x else ("self",)
            except ValueError:  # (an empty cell)
                return None
            if d is None:
                return None
            cells.append(d)
        try:
            return ("fn", *_dump_code(x.__code__), cells)
        except Unsaveable:
            return None
    return None


def _load_desc(d):
    if d[0] in ("ref", "empty"):
        return (d[0], _resolve(d[1]))
    if d[0] == "inst":
        return ("inst", _resolve(d[1]), [(k, _load_desc(e)) for k, e in d[2]])  # (d[1]: a local class's "lc")
    if d[0] == "wrap":
        return ("wrap", d[1], _load_desc(d[2]))
    if d[0] == "fn":
        return ("fn", _load_code(d[1], d[2]), [_load_desc(c) for c in d[3]])
    return d


def _matches(x, d) -> bool:
    if d[0] == "const":
        return type(x) is type(d[1]) and x == d[1]
    if d[0] == "ref":
        return x is d[1]
    if d[0] == "empty":
        return type(x) is d[1] and len(x) == 0
    if d[0] == "inst":
        cls, own = type(x), getattr(x, "__dict__", None)
        return (cls is d[1] if not isinstance(d[1], tuple) else _same_local_class(cls, d[1])) and \
            isinstance(own, dict) and own.keys() == {k for k, _ in d[2]} and all(_matches(own[k], e) for k, e in d[2])
    if d[0] == "wrap":
        return type(x).__name__ == d[1] and _matches(x.__func__, d[2])
    if d[0] == "fn":
        cl = getattr(x, "__closure__", None) or ()
        return isinstance(x, types.FunctionType) and x.__code__ == d[1] and len(cl) == len(d[2]) and \
            all(c.cell_contents is x if e == ("self",) else _matches(c.cell_contents, e) for c, e in zip(cl, d[2]))
    return False


def _local_class_ref(cls):
    """A class made inside a function (a new class object per call: no name reaches it from another
    process; transformers' hub-kernel function modules, say) described by value: its module and
    qualified name, its bases (by name), and every attribute of its own (constants, names, functions
    by code and closure contents); None when any of it cannot be described. Two classes with equal
    descriptions behave alike: the guard that compared the class object compares the description
    instead (___local_class). (A function outside such a class is compared by its code already.)"""
    if not isinstance(cls, type) or "<locals>" not in getattr(cls, "__qualname__", ""):
        return None
    bases = [_ref(b) for b in cls.__bases__]
    if any(b is None for b in bases):
        return None
    attrs = []
    for k, v in vars(cls).items():
        if k in _CLASS_BOOKKEEPING:
            continue
        d = _describe(v)
        if d is None:
            return None
        attrs.append((k, d))
    return ("lc", cls.__module__, cls.__qualname__, bases, attrs)


def _instance_ref(obj):
    """An object of a class made inside a function (a hub-kernel function module that a decorator
    made at import, say: every process has its own, at the same place) described by value: its
    class (as _local_class_ref) and every entry of its __dict__ (constants, names, empty
    containers, functions by code); None when any of it cannot be described."""
    cls = _local_class_ref(type(obj))
    own = getattr(obj, "__dict__", None)
    if cls is None or not isinstance(own, dict):
        return None
    attrs = []
    for k, v in own.items():
        e = _describe(v)
        if e is None:
            return None
        attrs.append((k, e))
    return ("inst", cls, attrs)


def _same_local_class(cls, d) -> bool:
    """Whether class `cls` matches a local class's description (see _local_class_ref)."""
    _, mod, qual, bases, attrs = d
    if not isinstance(cls, type) or cls.__module__ != mod or cls.__qualname__ != qual:
        return False
    if len(cls.__bases__) != len(bases) or any(a is not b for a, b in zip(cls.__bases__, bases)):
        return False
    own = {k: v for k, v in vars(cls).items() if k not in _CLASS_BOOKKEEPING}
    return own.keys() == {k for k, _ in attrs} and all(_matches(own[k], e) for k, e in attrs)


# ----------------------------------------------------------------------------- guards


def _constant(v) -> bool:
    """A value whose repr reads back as an equal value (the guard text holds it)."""
    if v is None or type(v) in (bool, int, str, bytes):
        return True
    if type(v) is float:
        return v == v and v not in (float("inf"), float("-inf"))
    return type(v) is tuple and all(_constant(x) for x in v)


_MARKED_SOURCE = re.compile(r"(L\['fn'\](?:\.__self__)?(?:\._modules\['[^']+'\])+)\.forward\b")
_PYTREE_NODES = "__import__('torch').utils._pytree.SUPPORTED_NODES"
_CHECK_ID = re.compile(r"___check_(type|obj)_id\((.*), (\d+)\)")
_L_REF = re.compile(r"L\['([^']+)'\]")


class _GuardText:
    """Dynamo's guards of one `_call` frame as Python text over L (the frame's locals at entry:
    fn, args, kwargs) and G (its globals), with the objects they compare against by reference;
    split into the checks of every call (those that read the arguments) and the checks of binding
    (those that read only L['fn'], the function and its module, or G; see the module text)."""

    def __init__(self):
        self.call: list[str] = []
        self.bind: list[str] = []
        self.values: list[str] = []  # the bind texts that compare a value read from the module
        self.objs: list = []  # references (_ref) the texts name as O[k]
        self.tensors: list = []  # (source text, dtype, requires_grad, sizes, strides) checked every call
        self.state: bytes | None = None  # pickled GlobalStateGuard
        self.tf_stack = 0
        self._seen: set[str] = set()
        self.fn = None  # the traced function, while its repeated blocks are marked (see _unmarked)
        self._marked: dict[str, bool] = {}

    def _obj(self, obj, what: str) -> str:
        r = _ref(obj)
        if r is None:
            raise Unsaveable(f"a guard compares {what} with {obj!r:.80}, which another process cannot name")
        self.objs.append(r)
        return f"O[{len(self.objs) - 1}]"

    def _is_class(self, expr: str, cls, what: str) -> str:
        """The check `expr is cls` for a class: by name, or by description for a class made inside a
        function (transformers' hub-kernel function modules, say)."""
        if _ref(cls) is None:
            d = _local_class_ref(cls)
            if d is not None:
                self.objs.append(d)
                return f"___local_class({expr}, O[{len(self.objs) - 1}])"
        return f"{expr} is {self._obj(cls, what)}"

    def _code_of(self, fn, what: str) -> str:
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType):
            raise Unsaveable(f"a guard compares {what} with {fn!r:.80}, which is no Python function")
        self.objs.append(("code", *_dump_code(code)))
        return f"O[{len(self.objs) - 1}]"

    def _unmarked(self, text: str) -> str:
        """A guard on a repeated block's marked forward (repeated.py: an instance attribute only while
        Dynamo traces) read through ___marked_forward(module) instead, which gives that same function
        (one per class, the same code in any process) whether the block is marked now or not."""
        def sub(m):
            prefix = m.group(1)
            if prefix not in self._marked:
                try:
                    obj = eval(prefix, {"L": {"fn": self.fn}})  # noqa: S307 (a chain of _modules lookups)
                    self._marked[prefix] = is_marked(obj)
                except Exception:
                    self._marked[prefix] = False
            return f"___marked_forward({prefix})" if self._marked[prefix] else m.group(0)

        return _MARKED_SOURCE.sub(sub, text)

    def add(self, text: str) -> None:
        if self.fn is not None and ".forward" in text:
            text = self._unmarked(text)
        if text in self._seen:
            return
        self._seen.add(text)
        if any(name != "fn" for name in _L_REF.findall(text)):  # (it reads the call's arguments)
            self.call.append(text)
            return
        self.bind.append(text)
        if text.startswith("L['fn']") and " == " in text and "__code__" not in text:
            self.values.append(text)  # (a value read from the module: checked on every call too)

    def translate(self, entries, dynamic: dict, state) -> None:
        """entries: Dynamo's GuardFilterEntry list; dynamic: source text -> (sizes, strides) of a
        graph input with None where the dim is symbolic; state: (pickled GlobalStateGuard, torch
        function mode stack depth) at the call."""
        for g in entries:
            t, og = g.guard_type, g.orig_guard
            src = og.name
            if t in _STATE_GUARDS:
                self.state, self.tf_stack = state  # (read at the call: Dynamo builds guards with torch functions off)
                continue
            if t == "TENSOR_MATCH":
                v = g.value
                if "._parameters[" in src or "._buffers[" in src:
                    # the weights: checked by the saved graph's weight guard on every call (identity,
                    # version; another dtype or shape traces again) and here when binding
                    self.add(f"type({src}) is {self._obj(type(v), src)}")
                    continue
                if not isinstance(v, torch.Tensor) or type(v) not in (torch.Tensor, torch.nn.Parameter):
                    raise Unsaveable(f"{src} is a {type(v).__name__}, not a plain tensor")
                sizes, strides = dynamic.get(src, (list(v.shape), list(v.stride())))
                self.tensors.append((src, str(v.dtype).replace("torch.", ""), bool(v.requires_grad), sizes, strides,
                                     type(v) is torch.nn.Parameter))
                continue
            if t == "CLOSURE_MATCH":
                self.add(f"{src}.__code__ == {self._code_of(g.value, src)}")
                continue
            if t == "NOT_PRESENT_IN_GENERIC_DICT":
                attr = getattr(og.create_fn, "keywords", {}).get("attr")
                if not isinstance(attr, str):
                    raise Unsaveable(f"a guard on {src}'s __dict__ names no attribute")
                self.add(f"not ___dict_contains({attr!r}, {src}.__dict__)")
                continue
            if t == "EMPTY_NN_MODULE_HOOKS_DICT":
                self.add(f"len({src}) == {len(g.value)}")
                continue
            codes = og.code_list or []
            if t in ("DICT_CONTAINS", "DICT_NOT_CONTAINS") and any("<" in c for c in codes):
                codes = []  # (a key whose repr is no Python: `<class 'tuple'>`; _text_of names it)
            if not codes:
                if t == "SHAPE_ENV":
                    continue
                self.add(self._text_of(t, src, g))
                continue
            for code in codes:
                code = code.split(", type=<", 1)[0] if ", type=<" in code else code
                m = _CHECK_ID.fullmatch(code)
                if m:
                    kind, expr, oid = m.group(1), m.group(2), int(m.group(3))
                    want = type(g.value) if kind == "type" else g.value
                    if not g.has_value or id(want) != oid:
                        raise Unsaveable(f"a guard on {expr} compares with an object not at its source")
                    if kind == "obj" and isinstance(want, types.FunctionType) and _ref(want) is None:
                        code = f"{expr}.__code__ == {self._code_of(want, expr)}"
                    elif kind == "obj" and isinstance(want, types.CodeType):
                        code = f"{expr} == {self._code_of(types.SimpleNamespace(__code__=want), expr)}"
                    elif isinstance(want, type):
                        code = self._is_class(f"type({expr})" if kind == "type" else expr, want, expr)
                    elif kind == "obj" and _ref(want) is None and _instance_ref(want) is not None:
                        self.objs.append(_instance_ref(want))
                        code = f"___same_instance({expr}, O[{len(self.objs) - 1}])"
                    else:
                        code = f"{'type(' + expr + ')' if kind == 'type' else expr} is {self._obj(want, expr)}"
                elif code.startswith("___dict_version(") and _PYTREE_NODES in code:
                    # torch's pytree registry unchanged (a repeated block's outputs flattened): its version is
                    # this process's, and the types the trace flattened are checked by their own
                    # DICT_CONTAINS guards; the saved bytecode flattens nothing through it
                    continue
                elif "___check_" in code or "___dict_version" in code or "___key_to_id" in code:
                    raise Unsaveable(f"Dynamo's {t} guard compares object ids: {code:.100}")
                if "top_saved_tensors_hooks" in code:
                    continue  # (saved-tensor hooks matter to backward graphs only)
                self.add(code)

    def _text_of(self, t: str, src: str, g) -> str:
        """The check of a guard Dynamo gave no text for (one it had installed already, say)."""
        v = g.value if g.has_value else None
        kw = getattr(g.orig_guard.create_fn, "keywords", None) or {}
        if t == "HASATTR" and isinstance(kw.get("attr"), str) and g.has_value:
            return f"{'' if hasattr(v, kw['attr']) else 'not '}hasattr({src}, {kw['attr']!r})"
        elif t in ("DICT_CONTAINS", "DICT_NOT_CONTAINS") and _constant(kw.get("key")):
            return f"{'not ' if t == 'DICT_NOT_CONTAINS' else ''}___dict_contains({kw['key']!r}, {src})"
        elif t in ("DICT_CONTAINS", "DICT_NOT_CONTAINS") and isinstance(v, dict) and _ref(kw.get("key")) is not None:
            # a key that is an object with a name (a repeated block's output flattening: `tuple in
            # torch.utils._pytree.SUPPORTED_NODES`), checked as it held at the trace
            return f"{'' if kw['key'] in v else 'not '}___dict_contains({self._obj(kw['key'], src)}, {src})"
        elif t == "DUPLICATE_INPUT" and isinstance(getattr(kw.get("source_b"), "name", None), str):
            return f"{src} is {kw['source_b'].name}"  # (Dynamo had added this pair already)
        elif t == "NONE_MATCH":
            return f"{src} is None"
        elif g.has_value and t == "TYPE_MATCH":
            return self._is_class(f"type({src})", type(v), src)
        elif g.has_value and t in ("ID_MATCH", "CLASS_MATCH", "MODULE_MATCH", "BUILTIN_MATCH"):
            return f"{src} is {self._obj(v, src)}"
        elif g.has_value and t in ("CONSTANT_MATCH", "EQUALS_MATCH") and _constant(v):
            return f"type({src}) is {self._obj(type(v), src)} and {src} == {v!r}"
        elif g.has_value and t == "SEQUENCE_LENGTH" and hasattr(v, "__len__"):
            return f"type({src}) is {self._obj(type(v), src)} and len({src}) == {len(v)}"
        elif g.has_value and t == "DICT_KEYS_MATCH" and isinstance(v, dict) and all(_constant(k) for k in v):
            return f"type({src}) is {self._obj(type(v), src)} and list(dict.keys({src})) == {list(v)!r}"
        raise Unsaveable(f"Dynamo's {t} guard on {src or 'the frame'} has no text to check it with")

    def record(self) -> dict:
        return {"call": self.call, "bind": self.bind, "values": self.values, "objs": self.objs, "tensors": self.tensors,
                "state": self.state, "tf_stack": self.tf_stack}


def _closure_vars() -> dict:
    """The helpers Dynamo's guard text calls (___dict_contains, utils_device, ...)."""
    get = getattr(_dynamo_guards, "_get_closure_vars", None)
    return dict(get() if get is not None else getattr(_dynamo_guards, "CLOSURE_VARS", {}))


def _probe_dict_version():
    """torch's reader of a dict's version tag (bumped by every write to the dict that changes it: storing
    the very object already there may leave it), where it works here;
    None where it does not (a Python without the tag): then every module value is read on every call."""
    try:
        from torch._C._dynamo.guards import dict_version
        d: dict = {}
        v0 = dict_version(d)
        d["a"] = 1
        v1 = dict_version(d)
        d["a"] = 2
        v2 = dict_version(d)
        return dict_version if len({v0, v1, v2}) == 3 else None
    except Exception:
        return None


_DICT_VERSION = _probe_dict_version()
_PLAIN_VALUE = (bool, int, float, str, type(None))


def _plain(v) -> bool:
    """A value that cannot change without a write to the dict holding it (exact types: a subclass
    could compare by state of its own)."""
    return type(v) in _PLAIN_VALUE or (type(v) is tuple and all(_plain(x) for x in v))


# `L['fn'].__self__._modules['a']._modules['b'].attr == <literal>`: a submodule's own attribute against a
# number, a string, True/False/None or a tuple of them (what Dynamo writes for a module's plain values)
_LIT = r"(?:-?\d+(?:\.\d*)?(?:e[-+]?\d+)?|'[^'\\]*'|True|False|None)"
_MODULE_VALUE = re.compile(r"L\['fn'\]\.__self__((?:\._modules\['[^'\\]*'\])*)\.([A-Za-z_]\w*) == "
                           rf"(?:{_LIT}|\((?:{_LIT}, )*(?:{_LIT},?)?\))")
_MODULES_HOP = re.compile(r"\._modules\['([^'\\]*)'\]")


def _value_path(text: str):
    """(the _modules names from L['fn'].__self__, the attribute) when `text` is a module value check
    of that form (_MODULE_VALUE), else None."""
    m = _MODULE_VALUE.fullmatch(text)
    return (tuple(_MODULES_HOP.findall(m.group(1))), m.group(2)) if m else None


def _module_value(path, root):
    """The module whose own plain attribute (a number, a string, None, a tuple of them, in its
    __dict__) the check of `path` (_value_path) reads under `root`: that check cannot change its
    answer while that dict is unchanged (any write to it bumps its version) and the module is the same
    object (every _modules dict of the tree is compared on every call, _still_bound). None otherwise."""
    names, attr = path
    m = root
    for n in names:
        m = m._modules.get(n) if isinstance(m, torch.nn.Module) else None
    if not isinstance(m, torch.nn.Module) or attr not in m.__dict__ or not _plain(m.__dict__[attr]):
        return None
    return m


class _Checks:
    """A saved entry's guards, compiled: `call(L)` every call, `bind(L)` when binding."""

    def __init__(self, rec: dict, G: dict):
        objs = []
        for r in rec["objs"]:
            objs.append(_resolve(r))  # (a name no longer there: the entry is not usable here)
        scope = {**_closure_vars(), "O": objs, "G": G, "__builtins__": builtins, "___same_code": _same_code(objs),
                 "___local_class": _same_local_class, "___same_instance": _matches,
                 "___marked_forward": bound_marked_forward}
        # every call: the checks of the arguments, and the values the trace read from the module and the
        # function's closure (a config value, an attribute such as a scale); binding: all the rest too
        # (classes, hooks, globals, code), when the entry meets a module object for the first time
        self.call_texts, self.bind_texts = rec["call"] + rec["values"], rec["bind"]
        self._arg_texts, self._value_texts = rec["call"], rec["values"]
        self._split = None  # (after bind_values: see there)
        self._paths = None  # (_value_path of each value text, made on the first binding)
        self._args = None  # (the checks of the arguments alone, made on the first binding)
        self._rest: tuple = ((), None)  # (the value texts read on every call, their check function)
        # (the checks' source is made when the entry is traced and saved with it: a load only compiles it)
        self.sources = (rec.get("call_src") or _checks_source(self.call_texts),
                        rec.get("bind_src") or _checks_source(rec["bind"]))
        # (and compiled: the entry keeps the code objects, marshalled; the Python version is checked at load)
        self.codes = tuple(marshal.loads(c) for c in rec["codes"]) if rec.get("codes") else \
            tuple(compile(src, "<airgraph.cache_compile guards>", "exec") for src in self.sources)
        self._call, self._bind = (_exec_checks(c, scope) for c in self.codes)
        self.scope = scope
        self.state = pickle.loads(rec["state"]) if rec["state"] is not None else None
        self.tf_stack = rec["tf_stack"]
        ts = rec["tensors"]
        self._tensor_texts = [t[0] for t in ts]
        self._tensors = None
        if ts:
            self._get = eval("lambda L: (" + "".join(t[0] + ", " for t in ts) + ")", scope)  # noqa: S307
            examples, sizes, strides = [], [], []
            for _, dt, rg, sz, st, param in ts:
                ex = torch.empty_strided([1 if s is None else s for s in sz], [1 if s is None else s for s in st],
                                         dtype=getattr(torch, dt))
                if rg:
                    ex.requires_grad_(True)
                examples.append(torch.nn.Parameter(ex, requires_grad=rg) if param else ex)
                sizes.append(sz)
                strides.append(st)
            self._tensors = torch._C._dynamo.guards.TensorGuards(*examples, dynamic_dims_sizes=sizes,
                                                                 dynamic_dims_strides=strides)

    def call(self, L) -> bool:
        if self.state is not None and not self.state.check():
            return False
        try:
            split = self._split
            if split is None:
                if not self._call(L):
                    return False
            else:
                args, rest, dicts, versions = split
                if not args(L) or (rest is not None and not rest(L)):
                    return False
                now = list(map(_DICT_VERSION, dicts))
                if now != versions:  # (a module's own attributes were written: every check again)
                    if not self._call(L):
                        return False
                    versions[:] = now
            return self._tensors is None or self._tensors.check(*self._get(L))
        except Exception:  # (an argument of another structure: the guard text cannot even be read)
            return False

    def bind(self, L) -> bool:
        try:
            return bool(self._bind(L)) and torch._C._len_torch_function_stack() == self.tf_stack
        except Exception:
            return False

    def bind_values(self, L) -> bool:
        """After bind: the value checks that read a module's own plain attribute (_module_value) are
        read on a call only when one of those modules' __dict__ versions moved (a model's hundreds of
        `eps`, `stride`, `training` values: one version read per module instead; then every check runs
        again); the others run on every call as before. Checks them all now; False if one fails."""
        self._split = None
        root = getattr(L["fn"], "__self__", None)
        if _DICT_VERSION is None or not self._value_texts or not isinstance(root, torch.nn.Module):
            return True
        if self._paths is None:
            self._paths = [_value_path(t) for t in self._value_texts]
        keep, dicts = [], {}
        for t, path in zip(self._value_texts, self._paths):
            m = None if path is None else _module_value(path, root)
            if m is None:
                keep.append(t)
            else:
                dicts[id(m)] = m.__dict__
        if not dicts:
            return True
        if self._args is None:  # (the arguments' checks alone: a short source, compiled once per entry)
            self._args = _exec_checks(compile(_checks_source(self._arg_texts), "<airgraph.cache_compile guards>",
                                              "exec"), self.scope)
        if self._rest[0] != keep:  # (compiled once per entry and split: a rebind finds the same one)
            self._rest = (keep, _exec_checks(compile(_checks_source(keep), "<airgraph.cache_compile guards>", "exec"),
                                             self.scope) if keep else None)
        ds = tuple(dicts.values())
        versions = list(map(_DICT_VERSION, ds))
        if not self._call(L):
            return False
        self._split = (self._args, self._rest[1], ds, versions)
        return True

    def why(self, L) -> str:
        """The first check that fails (for the log line of a new trace)."""
        if self.state is not None and not self.state.check():
            return f"torch's global state differs: {self.state.reason()}"
        for texts in (self.call_texts, self.bind_texts):
            for t in texts:
                try:
                    ok = eval(f"lambda L: {t}", self.scope)(L)  # noqa: S307
                except Exception as e:
                    ok, t = False, f"{t} ({type(e).__name__})"
                if not ok:
                    return f"{t} fails"
        if self._tensors is not None:
            try:
                return "an input tensor differs: " + str(self._tensors.check_verbose(
                    *self._get(L), tensor_check_names=self._tensor_texts))
            except Exception as e:
                return f"an input tensor is missing ({type(e).__name__})"
        return "?"


def _same_code(objs: list):
    """(code, k) -> whether `code` equals the saved code object O[k]: compared by value the first
    time, then by identity with the code object that matched (a function's code never changes in
    place; a new function brings a new code object, compared by value again)."""
    live: dict = {}

    def same(code, k) -> bool:
        if live.get(k) is code:
            return True
        if code == objs[k]:
            live[k] = code
            return True
        return False

    return same


def _exec_checks(code: types.CodeType, scope: dict):
    ns = dict(scope)
    exec(code, ns)  # noqa: S102 (defines _check from Dynamo's guard text, made by a trace of this function)
    return ns["_check"]


def _checks_source(texts: list[str]) -> str:
    """The source of one function `_check(L) -> bool` that runs the guard texts in order, each
    source (a chain of attributes and constant subscripts from L or G) read once into a local:
    Dynamo's texts repeat their sources' long prefixes. False as soon as a check fails or a source
    cannot be read."""
    names: dict[str, str] = {}
    lines: list[str] = []

    def chain(node) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
                return False
            node = node.value
        return isinstance(node, ast.Name) and node.id in ("L", "G")

    def var(node) -> ast.Name:
        """The local holding the chain `node` (its prefixes first), keyed by the chain's text."""
        if isinstance(node, ast.Name):
            return node
        base = var(node.value)
        step = f".{node.attr}" if isinstance(node, ast.Attribute) else f"[{node.slice.value!r}]"
        key = base.id + step
        if key not in names:
            names[key] = f"_v{len(names)}"
            lines.append(f"{names[key]} = {key}")
        return ast.Name(names[key], ast.Load())

    class Hoist(ast.NodeTransformer):
        def generic_visit(self, node):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and \
                    isinstance(node.value.func, ast.Name) and node.value.func.id == "dict" and \
                    len(node.value.args) == 1 and isinstance(node.value.args[0], ast.Attribute) and \
                    node.value.args[0].attr == "__dict__":
                node.value = node.value.args[0]  # dict(C.__dict__)[k] -> C.__dict__[k]: no copy of a class's dict
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq) and \
                    isinstance(node.left, ast.Attribute) and node.left.attr == "__code__" and \
                    isinstance(node.comparators[0], ast.Subscript) and isinstance(node.comparators[0].value, ast.Name) \
                    and node.comparators[0].value.id == "O":
                # a code object compared once by value, then by identity (see _same_code)
                node = ast.Call(ast.Name("___same_code", ast.Load()), [node.left, node.comparators[0].slice], [])
            if isinstance(node, (ast.Attribute, ast.Subscript)) and chain(node):
                return var(node)
            return super().generic_visit(node)

    for t in texts:
        expr = Hoist().visit(ast.parse(t, mode="eval")).body
        lines.append(f"if not ({ast.unparse(expr)}): return False")
    return "def _check(L):\n    try:\n" + "".join(f"        {l}\n" for l in lines) + \
        "        return True\n    except Exception:\n        return False\n"


class _Progress:
    """A line on stderr while a trace takes longer than a few seconds (AIRGRAPH_PROGRESS_AFTER,
    default 3): what is being done and for how long, then how long it took. Only where stderr is a
    terminal, or AIRGRAPH_PROGRESS=1."""

    def __init__(self, what: str, rec: "_Recording"):
        self.what, self.rec = what, rec
        self.done = threading.Event()
        self.thread = None

    def __enter__(self):
        if sys.stderr.isatty() or os.environ.get("AIRGRAPH_PROGRESS") == "1":
            self.after = float(os.environ.get("AIRGRAPH_PROGRESS_AFTER", "3"))
            self.t0 = time.perf_counter()
            self.thread = threading.Thread(target=self._show, daemon=True, name="airgraph-progress")
            self.thread.start()
        return self

    def _show(self):
        shown, width = False, 0
        while not self.done.wait(1.0 if shown else self.after):
            shown = True
            text = f"airgraph: {self.what}: {self.rec.stage} ({time.perf_counter() - self.t0:.0f} s)"
            sys.stderr.write("\r" + text.ljust(width))
            sys.stderr.flush()
            width = len(text)
        if shown:
            sys.stderr.write("\r" + f"airgraph: {self.what}: traced and compiled {len(self.rec.graphs)} graph(s) in "
                             f"{self.rec.split(time.perf_counter() - self.t0)}".ljust(width) + "\n")
            sys.stderr.flush()

    def __exit__(self, *exc):
        self.done.set()
        if self.thread is not None:
            self.thread.join()


# ----------------------------------------------------------------------------- one trace's recordings


class _Recording:
    """What Dynamo made while tracing one call: the frames it converted, the graphs the backend
    compiled, the guards of each frame."""

    def __init__(self):
        self.codes: list = []  # (original code, transformed code)
        self.graphs: list = []  # (backend result, record or None, why not)
        self.guards: list = []  # (_GuardText or None, why not)
        self.files: set[str] = set()
        self.dynamic: dict = {}
        self.marked: list[str] = []  # the classes whose instances were marked as repeated blocks
        self.stage = "Dynamo is tracing the Python code"
        self.state = (pickle.dumps(torch._C._dynamo.guards.GlobalStateGuard()), torch._C._len_torch_function_stack())

    def block_calls(self) -> int:
        """How many repeated-block calls (invoke_subgraph) the trace's graphs held (inlined before lowering)."""
        reports = [getattr(c, "state", {}).get("report") for c, _, _ in self.graphs]
        return sum(getattr(r, "inlined_subgraphs", 0) for r in reports if r is not None)

    def split(self, seconds: float) -> str:
        """'12.3 s (Dynamo tracing 4.1 s, AOTAutograd ..., recording 0.5 s)': where a trace's time went,
        the graphs' phases (CompileReport.phases) and the rest (this module's recording: the guards'
        translation, the saved graphs; and the first run)."""
        reports = [getattr(c, "state", {}).get("report") for c, _, _ in self.graphs]
        phases = sum_phases(r for r in reports if r is not None)
        rest = seconds - sum(phases.values())
        text = phases_text(phases)
        return f"{seconds:.1f} s" + (f" ({text}, recording and first run {max(0.0, rest):.2f} s)" if text else "")


_ACTIVE = threading.local()


def _bytecode_hook(code, new_code):
    rec = getattr(_ACTIVE, "rec", None)
    if rec is not None:
        rec.codes.append((code, new_code))


_HOOK = None
_HOOK_LOCK = threading.Lock()


def _install_hooks():
    """Once per process: the bytecode hook (which frames Dynamo converts)."""
    global _HOOK
    with _HOOK_LOCK:
        if _HOOK is None:
            _HOOK = torch._dynamo.convert_frame.register_bytecode_hook(_bytecode_hook)


def _file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _versions(config: CompilerConfig) -> dict:
    try:
        import transformers
        tf = transformers.__version__
    except Exception:  # (not installed: nothing traced can come from it)
        tf = None
    return {"airgraph": __version__, "torch": torch.__version__, "transformers": tf,
            "python": sys.version.split()[0], "cpu": _cache._cpu_features(), "engine": _cache._ENGINE,
            "config": repr({f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                            if f.name not in ("cache_dir", "dump_dir")})}


# ----------------------------------------------------------------------------- entries


class _Entry:
    """One saved frame: its checks and the function that runs its transformed bytecode."""

    def __init__(self, data: dict, globals_: dict, graphs: dict, prefix: str = "", raw: dict | None = None):
        """graphs: the compiled functions by the names the bytecode reads them as (wrapped so that
        Dynamo does not trace into them); raw: the same functions unwrapped (default: unwrapped
        here); prefix: what a loaded entry puts before the names Dynamo installed in the module's
        globals (this process's Dynamo installs its own under the same names)."""
        rename = {n: prefix + n for n in (*graphs, *data["installed"])} if prefix else {}
        for name, value in graphs.items():  # (the transformed bytecode reads them as globals)
            globals_[rename.get(name, name)] = value
        for name, ref in data["installed"].items():
            if rename.get(name, name) not in globals_:
                globals_[rename.get(name, name)] = _resolve(ref)
        # the checks read Dynamo's globals under the names they were traced with (G is theirs)
        checks_g = {**globals_, **{n: globals_[r] for n, r in rename.items()}} if rename else globals_
        self.checks = _Checks(data["guards"], checks_g)
        code = _load_code(data["code"], data["extras"])
        # the graphs also under names of ours: torch._dynamo.reset() removes the globals Dynamo installed,
        # which an entry traced in this process would otherwise read
        wrapped = {}
        for name, value in graphs.items():
            wrapped[name] = f"{rename.get(name, name)}__airgraph"
            globals_[wrapped[name]] = value
        self.replay = types.FunctionType(_renamed(code, {**rename, **wrapped}), globals_, "_call")  # (no defaults)
        # The same bytecode for calls made where no Dynamo callback is set (a plain call, not inside a
        # torch.compile'd region; CacheCompiled.__call__ picks): it calls the graphs unwrapped (no
        # torch._dynamo.disable frame, which sets and restores the eval-frame callback, per graph) and
        # Dynamo's profiler markers only while a profiler runs (_FastDynamoUtils)
        fast = {}
        for name, value in graphs.items():
            fast[name] = f"{rename.get(name, name)}__airgraph_raw"
            globals_[fast[name]] = (raw or {}).get(name) or _unwrap(value)
        for name in data["installed"]:
            if globals_[rename.get(name, name)] is _dynamo_utils:
                fast[name] = "__airgraph_fast_dynamo_utils"
                globals_[fast[name]] = _FAST_DYNAMO_UTILS
        self.replay_fast = types.FunctionType(_renamed(code, {**rename, **fast}), globals_, "_call")
        self.marked = bool(data.get("marked"))  # traced with repeated blocks marked (repeated.py)
        self.bound = False  # whether its binding checks passed (CacheCompiled._bind, _still_bound)
        # (hook dicts empty at binding, the others, their lengths; the module tree's _modules dicts and their versions)
        self.hook_state, self.children = ((), (), ()), ((), [])


def _renamed(code: types.CodeType, rename: dict) -> types.CodeType:
    """`code` (and the code objects in its constants) reading the globals named in `rename` under new names."""
    if not rename:
        return code
    consts = tuple(_renamed(k, rename) if isinstance(k, types.CodeType) else k for k in code.co_consts)
    return code.replace(co_names=tuple(rename.get(n, n) for n in code.co_names), co_consts=consts)


_NO_PROFILE = contextlib.nullcontext()


class _FastDynamoUtils:
    """torch._dynamo.utils as a replayed bytecode reads it: the markers Dynamo's bytecode sets around
    its graph call for the profiler ("Pregraph bytecode") are Dynamo's only while a profiler runs
    (each is a torch._dynamo.disable'd function otherwise: ~1 us a call); anything else is the module's."""

    @staticmethod
    def record_pregraph_bytecode_enter():
        if torch.autograd.profiler._is_profiler_enabled:
            return _dynamo_utils.record_pregraph_bytecode_enter()
        return _NO_PROFILE

    @staticmethod
    def record_pregraph_bytecode_exit(cm) -> None:
        if cm is not _NO_PROFILE:
            _dynamo_utils.record_pregraph_bytecode_exit(cm)

    def __getattr__(self, name):  # (the module's functions, read once: later reads find them in the instance)
        value = getattr(_dynamo_utils, name)
        self.__dict__[name] = value
        return value


_FAST_DYNAMO_UTILS = _FastDynamoUtils()


def _call(fn, /, *args, **kwargs):
    """The frame Dynamo traces for every cache_compiled function (each CacheCompiled has its own
    copy of this code, so that Dynamo's cache and recompile count are its own): `fn` is a local of
    the frame, so Dynamo's guards read the module as L['fn'] (checked on binding, and its values on
    every call) and the call's arguments as L['args'] and L['kwargs'] (checked on every call),
    whatever file `fn` lives in (torch's own modules, such as nn.Sequential, included)."""
    return fn(*args, **kwargs)


class CacheCompiled:
    """What airgraph.cache_compile returns: call it like the function (see the module text)."""

    def __init__(self, fn, cache_dir: str | None = None, config: CompilerConfig | None = None, dynamic=True):
        self.config = config or CompilerConfig()
        if not callable(fn) or not isinstance(getattr(fn, "__func__", fn), types.FunctionType):
            raise TypeError(f"airgraph.cache_compile takes a Python function or bound method, got {type(fn).__name__}")
        self.fn = fn
        owner = getattr(fn, "__self__", None)
        func = getattr(fn, "__func__", fn)
        self.dynamic = dynamic
        folder = cache_dir if cache_dir is not None else self.config.cache_dir
        ident = "\0".join([func.__module__ or "", func.__qualname__, func.__code__.co_filename,
                           f"{type(owner).__module__}.{type(owner).__qualname__}" if owner is not None else "",
                           getattr(fn, "__name__", "")])
        self.key = hashlib.sha256(ident.encode()).hexdigest()[:24]
        self.folder = os.path.join(folder, "cache_compile", self.key) if folder else None
        self._frame = types.FunctionType(_call.__code__.replace(co_name="_call"), _call.__globals__, "_call")
        _install_hooks()
        self.entries: tuple = ()
        self.lock = threading.RLock()
        self._compiled = None
        self._loaded = False
        self.unsaved: str | None = None  # why the last trace could not be saved
        # (marked: traces whose graph held repeated blocks traced once)
        self.counts = {"replays": 0, "traces": 0, "loaded": 0, "saved": 0, "stale": 0, "rebuilt": 0, "marked": 0}
        # mark the module's repeated blocks while tracing (CompilerConfig.repeated_blocks; off after a
        # marked trace broke the graph)
        self._mark_blocks = self.config.repeated_blocks == "auto" and isinstance(owner, torch.nn.Module)
        functools.update_wrapper(self, fn)

    # -- calls

    def __call__(self, *args, **kwargs):
        if not self._loaded:
            self._load()
        L = {"fn": self.fn, "args": args, "kwargs": kwargs}
        for e in self.entries:
            if e.checks.call(L) and (self._still_bound(e) or self._bind(e, L)):
                try:
                    # (inside a torch.compile'd region, Dynamo's callback is set: the graphs are called through
                    # torch._dynamo.disable, as Dynamo installs them, so that Dynamo does not trace into them)
                    replay = e.replay_fast if _eval_frame_callback() is None else e.replay
                    out = replay(self.fn, *args, **kwargs)
                except InputMismatch as err:  # (raised before the graph ran: no side effect happened)
                    log.info("airgraph.cache_compile: %s: the saved graph refused the inputs (%s); tracing again",
                             self.__qualname__, err)
                    break
                self.counts["replays"] += 1
                return out
        return self._trace(args, kwargs, L)

    def _bind(self, e: _Entry, L) -> bool:
        """The entry's checks of the module's classes, hooks, globals and code (L['fn'] is the same
        object on every call: once per entry and process, and again after the module changed)."""
        e.bound = False
        # an entry traced with its repeated blocks marked: the checks of the classes' code see them marked
        # again (guards on a marked class's forward, through transformers' registries say)
        with marked_blocks(getattr(self.fn, "__self__", None)) if e.marked else contextlib.nullcontext():
            ok = e.checks.bind(L) and e.checks.bind_values(L)
        if not ok:
            return False
        dicts, children = _module_state(getattr(self.fn, "__self__", None))
        full = tuple(d for d in dicts if d)
        e.hook_state = (tuple(d for d in dicts if not d), full, tuple(map(len, full)))
        # (the _modules dicts by their versions, where torch reads them: a submodule set bumps its dict's)
        kids = tuple(children)
        e.children = (kids, list(map(_DICT_VERSION, kids)) if _DICT_VERSION else [tuple(d.values()) for d in kids])
        e.bound = True
        return True

    @staticmethod
    def _still_bound(e: _Entry) -> bool:
        """What binding checked still holds, read cheaply on every call: no hook added or removed
        anywhere in the module tree (or globally), and every submodule the same object (a module
        replaced by another, of another class, binds again and traces if its checks fail; the
        _modules dicts are compared by version where torch reads it, else by their values). The hook
        dicts that were empty are read by truth value (most of them: one C-level `any`), the others
        by length."""
        empty, full, counts = e.hook_state
        kids, seen = e.children
        return e.bound and not any(empty) and tuple(map(len, full)) == counts and \
            (list(map(_DICT_VERSION, kids)) == seen if _DICT_VERSION else
             all(tuple(d.values()) == v for d, v in zip(kids, seen)))

    # -- tracing

    def _compiled_fn(self):
        if self._compiled is None:
            def guards(entries):
                rec = getattr(_ACTIVE, "rec", None)
                if rec is not None:
                    g = _GuardText()
                    try:
                        g.fn = self.fn if rec.marked else None
                        g.translate(entries, rec.dynamic, rec.state)
                        rec.guards.append((g, ""))
                    except Unsaveable as e:
                        rec.guards.append((None, str(e)))
                    except Exception as e:  # (a guard this code does not know: not saved, still compiled)
                        rec.guards.append((None, f"{type(e).__name__}: {e}"))
                return [True] * len(entries)

            self._compiled = torch.compile(self._frame, backend=functools.partial(_recording_backend,
                                                                                  config=self.config),
                                           dynamic=self.dynamic, options={"guard_filter_fn": guards})
        return self._compiled

    def _trace(self, args, kwargs, L):
        with self.lock:
            why = ""
            if self.entries and log.isEnabledFor(logging.INFO):
                why = "; ".join(e.checks.why(L) for e in self.entries[:3])
            rec = _Recording()
            prev = getattr(_ACTIVE, "rec", None)
            _ACTIVE.rec = rec
            t0 = time.perf_counter()
            try:
                # specialize_float: a norm's eps stays a constant of the graph, as without dynamic=True
                # (a saved graph takes tensors and sizes only), and Dynamo does not restart its analysis
                # of the prefill to turn such floats into tensors (a second trace under dynamic=True)
                # skip_nnmodule_hook_guards off: Dynamo's own entries (which serve calls no saved entry
                # matches) then also see a hook added after the trace, as the saved entries do
                # use_duck_shape off: dims equal by chance on the first call get their own symbols (a
                # prompt of head-dim tokens would otherwise fix generate()'s first decode step's KV
                # length to the head dim: a third trace)
                # the repeated blocks (config.repeated_blocks, repeated.py): marked while Dynamo traces
                marking = marked_blocks(getattr(self.fn, "__self__", None)) if self._mark_blocks \
                    else contextlib.nullcontext(())
                snapshot, restore = cache_snapshot(args, kwargs) if self._mark_blocks else ((), None)
                # (a DynamicCache's head sizes pinned, its layers' lengths are the only sizes that
                # duck sizing can merge: one symbol for all, so that one layer's region serves the next)
                duck = self._mark_blocks and pin_cache_heads(args, kwargs)
                breaks = sum(_dynamo_utils.counters["graph_break"].values())
                with torch._dynamo.config.patch(specialize_float=True, skip_nnmodule_hook_guards=False), \
                        _shapes_config.patch(use_duck_shape=duck), _Progress(self.__qualname__, rec), \
                        marking as marked:
                    rec.marked = [c.__qualname__ for c in marked]
                    try:
                        out = self._compiled_fn()(self.fn, *args, **kwargs)
                    except torch._dynamo.exc.TorchDynamoException as e:
                        if not rec.marked:
                            raise
                        # Dynamo failed while tracing the marked blocks (torch 2.13's stamping out of a region
                        # with symbolic sizes can: KeyError in stamp_out_subgraph); should part of the frame
                        # have run, a DynamicCache goes back as it was
                        if snapshot:
                            restore()
                        failed = e
                    except StandInError as e:
                        # a marked block wanted more of its DynamicCache than the stand-in has (the frame
                        # may have run in part, after a graph break): the cache goes back as it was
                        if not rec.marked or not snapshot:
                            raise
                        restore()
                        failed = e
                if rec.marked and "out" not in locals():
                    self._mark_blocks = False
                    log.info("airgraph.cache_compile: %s: Dynamo failed on the marked repeated blocks (%s: %s); "
                             "tracing again unmarked (and from now on)", self.__qualname__, ", ".join(rec.marked),
                             f"{type(failed).__name__}: {str(failed).splitlines()[0] if str(failed) else ''}")
                    _ACTIVE.rec = prev
                    return self._trace(args, kwargs, L)
            finally:
                _ACTIVE.rec = prev
            if rec.marked and sum(_dynamo_utils.counters["graph_break"].values()) > breaks:
                # the call is not run again (its side effects, a KV cache's update, have happened): the
                # next call traces unmarked, and that trace is saved
                self._mark_blocks = False
                log.info("airgraph.cache_compile: %s: Dynamo broke the graph while the repeated blocks (%s) were "
                         "marked; they are not marked from now on, and the next call traces again unmarked",
                         self.__qualname__, ", ".join(rec.marked))
                return out
            if not rec.codes:  # Dynamo's own entries served the call (a signature that could not be saved)
                return out
            self.counts["traces"] += 1
            calls = rec.block_calls()
            if calls:
                self.counts["marked"] += 1
            log.info("airgraph.cache_compile: %s: traced with Dynamo in %s; %s%s", self.__qualname__,
                     rec.split(time.perf_counter() - t0), why or "no saved graph for these inputs",
                     f"; repeated blocks ({', '.join(rec.marked)}) traced once for {calls} calls" if calls else "")
            try:
                entry, data = self._entry_from(rec)
            except Unsaveable as e:
                self.unsaved = str(e)
                log.warning("airgraph.cache_compile: %s: these inputs run through torch.compile and are not "
                            "saved: %s", self.__qualname__, e)
                return out
            self.entries = (entry,) + self.entries
            self._bind(entry, L)
            self._save(data)
            return out

    def _entry_from(self, rec: _Recording):
        mine = [(c, n) for c, n in rec.codes if c is self._frame.__code__]
        if len(rec.codes) != 1 or not mine:
            raise Unsaveable(f"Dynamo compiled {len(rec.codes)} frames ("
                             + ", ".join(c.co_name for c, _ in rec.codes) + "): a graph break")
        if len(rec.guards) != 1:
            raise Unsaveable("Dynamo built no guards for the frame" if not rec.guards else "several guard sets")
        guards, why = rec.guards[0]
        if guards is None:
            raise Unsaveable(why)
        new_code = mine[0][1]
        G = self._frame.__globals__
        names = set()

        def collect(c):
            names.update(c.co_names)
            for k in c.co_consts:
                if isinstance(k, types.CodeType):
                    collect(k)

        collect(new_code)
        graphs, installed = {}, {}
        for name in sorted(names):
            if name.startswith("__resume_at"):
                raise Unsaveable("a graph break (Dynamo resumes in another frame)")
            if name.startswith("__compiled_fn"):
                obj = _unwrap(G.get(name))
                found = [r for r in rec.graphs if r[0] is obj]
                if not found:
                    raise Unsaveable(f"the compiled function {name} was not made by this trace")
                if found[0][1] is None:
                    raise Unsaveable(f"its graph cannot be saved: {found[0][2]}")
                graphs[name] = found[0][1]
            elif name in G and name not in _OWN_GLOBALS:  # (a global Dynamo installed in this module)
                r = _ref(G[name])
                if r is None:
                    raise Unsaveable(f"Dynamo's global {name} ({G[name]!r:.60}) cannot be named in another process")
                installed[name] = r
        for name in re.findall(r"G\['([^']+)'\]", " ".join(guards.call + guards.bind)):
            if name in G and name not in _OWN_GLOBALS and name not in installed:
                r = _ref(G[name])
                if r is None:
                    raise Unsaveable(f"a guard reads Dynamo's global {name}, which cannot be named in another process")
                installed[name] = r
        data_code, extras = _dump_code(new_code)
        files = sorted(rec.files | {getattr(self.fn, '__func__', self.fn).__code__.co_filename})
        data = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": _versions(self.config),
                "sources": {f: _file_digest(f) for f in files}, "code": data_code, "extras": extras,
                "installed": installed, "graphs": graphs, "guards": guards.record(), "created": time.time(),
                "marked": rec.marked}
        live = {name: G[name] for name in graphs}  # this process keeps Dynamo's compiled functions
        entry = _Entry(data, G, live)
        data["guards"]["call_src"], data["guards"]["bind_src"] = entry.checks.sources
        data["guards"]["codes"] = [marshal.dumps(c) for c in entry.checks.codes]
        return entry, data

    # -- the folder

    def _save(self, data: dict) -> None:
        if not self.folder:
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
            blob = pickle.dumps(data, protocol=4)
            name = hashlib.sha256(blob).hexdigest()[:20] + ".agcc"
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, os.path.join(self.folder, name))
            self.counts["saved"] += 1
            for old in self._entry_files()[MAX_ENTRIES:]:
                os.unlink(old)
        except OSError as e:
            log.warning("airgraph.cache_compile: could not write to %s (%s); the entry lives in this process only",
                        self.folder, e)

    def _entry_files(self) -> list[str]:
        """The folder's entries, newest first."""
        return sorted((os.path.join(self.folder, f) for f in os.listdir(self.folder) if f.endswith(".agcc")),
                      key=os.path.getmtime, reverse=True)

    def _load(self) -> None:
        with self.lock:
            if self._loaded:
                return
            self._loaded = True
            if not self.folder or not os.path.isdir(self.folder):
                return
            entries, versions = [], _versions(self.config)
            for path in self._entry_files():
                try:
                    with open(path, "rb") as f:
                        data = pickle.load(f)
                    if not isinstance(data, dict) or data.get("format") != FORMAT or \
                            data.get("format_version") != FORMAT_VERSION:
                        raise ValueError("not an entry of this format")
                except Exception as e:
                    log.warning("airgraph.cache_compile: %s is damaged or foreign (%s: %s); it is rebuilt", path,
                                type(e).__name__, e)
                    self.counts["rebuilt"] += 1
                    _unlink(path)
                    continue
                stale = [f"{k} {data['versions'].get(k)} -> {v}" for k, v in versions.items()
                         if data["versions"].get(k) != v]
                stale += [f"{os.path.basename(f)} changed" for f, d in data["sources"].items() if _file_digest(f) != d]
                if stale:
                    log.info("airgraph.cache_compile: %s: saved entry %s is stale (%s); it is traced again",
                             self.__qualname__, os.path.basename(path), "; ".join(stale[:3]))
                    self.counts["stale"] += 1
                    _unlink(path)
                    continue
                try:
                    graphs = {n: _disabled(SavedGraph(r, self.config)) for n, r in data["graphs"].items()}
                    prefix = f"__airgraph_{os.path.basename(path)[:12]}"
                    entries.append(_Entry(data, self._frame.__globals__, graphs, prefix))
                except Exception as e:  # (a name the entry needs is gone from this process's packages)
                    log.info("airgraph.cache_compile: %s: saved entry %s cannot be used here (%s: %s)",
                             self.__qualname__, os.path.basename(path), type(e).__name__, e)
                    self.counts["stale"] += 1
                    continue
            self.entries = tuple(entries) + self.entries
            self.counts["loaded"] += len(entries)

    def __repr__(self):
        return (f"airgraph.cache_compile({self.__qualname__}, {len(self.entries)} entries, folder={self.folder!r}, "
                f"{self.counts})")


_HOOK_ATTRS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = tuple(getattr(torch.nn.modules.module, "_global" + a, None) for a in _HOOK_ATTRS)


def _module_state(obj) -> tuple[tuple, list]:
    """(every forward/backward hook dict of the module tree under `obj` and torch's global ones,
    the tree's non-empty `_modules` dicts): a hook added after binding changes a hook dict's length,
    a submodule replaced changes a `_modules` dict's values (checked on every call, a few ns each)."""
    dicts, children = [d for d in _GLOBAL_HOOKS if isinstance(d, dict)], []
    if isinstance(obj, torch.nn.Module):
        for m in obj.modules():
            dicts += [getattr(m, a) for a in _HOOK_ATTRS if isinstance(getattr(m, a, None), dict)]
            if m._modules:
                children.append(m._modules)
    return tuple(dicts), children


def _disabled(fn):
    """The saved graph as Dynamo's compiled functions are installed: not traced into by Dynamo."""
    return torch._dynamo.disable(fn)


def _unwrap(obj, depth: int = 8):
    for _ in range(depth):
        inner = getattr(obj, "_torchdynamo_orig_callable", None) or getattr(obj, "__wrapped__", None)
        if inner is None or inner is obj:
            break
        obj = inner
    return obj


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _recording_backend(gm, example_inputs, config: CompilerConfig):
    """airgraph's backend, also recording what another process needs to run the graph."""
    rec = getattr(_ACTIVE, "rec", None)
    if rec is not None:
        tc = torch._guards.TracingContext.try_get()
        for c in (getattr(tc, "traced_code", None) or ()):
            rec.files.add(c.co_filename)
        for n in gm.graph.nodes:
            ga = n.meta.get("grapharg") if n.op == "placeholder" else None
            v = n.meta.get("example_value")
            if ga is None or getattr(ga, "source", None) is None or not isinstance(v, torch.Tensor):
                continue
            rec.dynamic[ga.source.name] = ([d if isinstance(d, int) else None for d in v.shape],
                                           [s if isinstance(s, int) else None for s in v.stride()])
        n = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        rec.stage = f"airgraph is compiling graph {len(rec.graphs) + 1} ({n} ops)"
    compiled = _backend.airgraph_backend(gm, example_inputs, config=config)
    if rec is not None:
        rec.stage = "Dynamo is building the guards"
        try:
            saved, why = artifact(compiled)
        except Exception as e:
            saved, why = None, f"{type(e).__name__}: {e}"
        rec.graphs.append((compiled, saved, why))
    return compiled


def cache_compile(fn=None, *, cache_dir: str | None = None, config: CompilerConfig | None = None, dynamic=True):
    """Compiles `fn` (a function or a bound method such as model.forward) with airgraph and saves
    the result so that later calls and later processes skip Dynamo (see the module text).

        model.forward = airgraph.cache_compile(model.forward)
        @airgraph.cache_compile(cache_dir="/var/cache/mymodel")
        def step(x): ...

    cache_dir: where entries are kept (default: the compile cache's folder, config.cache_dir;
    "" keeps them in this process only); config: a CompilerConfig; dynamic: torch.compile's
    (True: one graph serves every length).

    A bound method of a module: with config.repeated_blocks="auto" (the default) its repeated layers
    (an nn.ModuleList of >= 2 modules of one class) are marked as torch.compiler.nested_compile_region
    while Dynamo traces, so that Dynamo and AOTAutograd trace one layer, not N (a 12-layer RoBERTa's
    first call: 6.2 -> 3.4 s), decoder layers handed a DynamicCache too, through a stand-in for their
    own cache layer; other caches run unmarked (airgraph/repeated.py)."""
    if fn is None:
        return lambda f: CacheCompiled(f, cache_dir, config, dynamic)
    return CacheCompiled(fn, cache_dir, config, dynamic)


# the module's own globals: any other name in them was installed by Dynamo for a traced _call frame
_OWN_GLOBALS = frozenset(globals()) | {"_OWN_GLOBALS"}

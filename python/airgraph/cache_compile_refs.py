"""airgraph.cache_compile's references: what a saved entry names so that another process finds the
same object. A code object is marshalled with its constants that marshal cannot write pickled beside it
(_dump_code, _load_code); a module-level object is named by module and qualified name (_ref, _resolve); a
class made inside a function, and an object of one, is described by value (its bases by name, every
attribute of its own: constants, names, empty containers, functions by code and closure contents) and
compared by that description (_local_class_ref, _instance_ref, _same_local_class, _matches).
Used by the guards' translation (cache_compile_checks.py) and the entries (cache_compile.py).
"""
from __future__ import annotations

import builtins
import collections
import enum
import importlib
import marshal
import pickle
import types


class Unsaveable(Exception):
    """Why a traced frame cannot be kept as a saved entry."""


_MARK = "__airgraph_const__"


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


def _constant(v) -> bool:
    """A value whose repr reads back as an equal value (the guard text holds it)."""
    if v is None or type(v) in (bool, int, str, bytes):
        return True
    if type(v) is float:
        return v == v and v not in (float("inf"), float("-inf"))
    return type(v) is tuple and all(_constant(x) for x in v)

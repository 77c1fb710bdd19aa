"""airgraph.cache_compile's checks: Dynamo's guards of a traced frame as Python text (_GuardText,
recorded while Dynamo builds them), split into the checks of every call and those of binding, and
compiled into one function each (_Checks: the texts' common sources read once into locals; a module's
plain values read again only when its __dict__ version moved). See cache_compile.py's module text for
what is checked when.
"""
from __future__ import annotations

import ast
import builtins
import marshal
import pickle
import re
import types

import torch
from torch._dynamo import guards as _dynamo_guards

from .cache_compile_refs import (Unsaveable, _constant, _dump_code, _instance_ref, _local_class_ref, _matches,
                                 _ref, _resolve, _same_local_class)
from .repeated import bound_marked_forward, is_marked

_STATE_GUARDS = ("GRAD_MODE", "DETERMINISTIC_ALGORITHMS", "GLOBAL_STATE", "TORCH_FUNCTION_STATE",
                 "AUTOGRAD_SAVED_TENSORS_HOOKS", "DEFAULT_DEVICE")


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

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

Three files: this one (recording a trace, the entries on disk, the replay), cache_compile_checks.py
(Dynamo's guards translated into checks) and cache_compile_refs.py (how an entry names objects for
another process).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
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
from .cache_compile_checks import _DICT_VERSION, _Checks, _GuardText
from .cache_compile_refs import Unsaveable, _dump_code, _load_code, _ref, _resolve
from .config import CompilerConfig
from .graph_types import InputMismatch, phases_text, sum_phases
from .repeated import StandInError, cache_snapshot, marked_blocks, pin_cache_heads
from .saved_graph import SavedGraph, artifact

log = logging.getLogger("airgraph")

FORMAT, FORMAT_VERSION = "airgraph-cache-compile", 1
MAX_ENTRIES = 16  # entries kept per function on disk (the newest)




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

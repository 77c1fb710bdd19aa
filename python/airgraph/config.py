"""CompilerConfig: every switch of the compiler in one object.

Pass it as `torch.compile(m, backend=airgraph.get_backend(CompilerConfig(...)))`
or as `torch.compile(m, backend="airgraph", options={...})` with the same field
names.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from ._core import C


def _env(name: str, default=None):
    return os.environ.get(name, default)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def default_cache_dir() -> str:
    """$AIRGRAPH_CACHE_DIR ("" or 0 switches the cache off), else $XDG_CACHE_HOME/airgraph, else
    ~/.cache/airgraph."""
    env = os.environ.get("AIRGRAPH_CACHE_DIR")
    if env is not None:
        return "" if env.strip().lower() in ("", "0", "off", "false", "no") else env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "airgraph")


@dataclass
class CompilerConfig:
    # Parameters and buffers are bound as constants of the engine graph (zero-copy;
    # the passes may fold them, prepack them, fold BatchNorm into a convolution).
    # By default every call checks that each one is still the tensor it was built
    # with (same data pointer, same version counter): a reassigned parameter,
    # load_state_dict and in-place updates under no_grad are seen, and the engine
    # graph(s) using a changed weight are rebuilt (logged at INFO). The check costs
    # about 2 us per call for BERT-base's 201 tensors (csrc/bindings/weights.cpp).
    # frozen_parameters=True promises the weights never change after compiling and
    # skips the checks (like TorchAir's frozen_parameter, Inductor's freezing).
    # Risk: a weight changed after compiling then gives stale (or partly stale)
    # results, with no error. Not seen even by the checks: writes that bypass the
    # version counter, i.e. through `.data` (`p.data.copy_(x)`) or another
    # library's view of the memory (numpy, DLPack); write to the tensor itself
    # under torch.no_grad() instead. Inputs the graph itself writes (BatchNorm's
    # running stats in train mode) are never bound; they are read per call.
    frozen_parameters: bool = False
    # Ops the engine cannot run are executed by PyTorch; with fallback=False an
    # unsupported op is an error instead.
    fallback: bool = True
    # Names of C++ passes to switch off (see airgraph.pass_names()), to bisect a
    # wrong result to a pass. A name that is no such pass is refused, with the list.
    disable_passes: list[str] = field(default_factory=list)
    # Largest constant (bytes) the constant folder may create.
    fold_max_bytes: int = 1 << 20
    # Let elementwise ops write over an input buffer that dies at that op.
    allow_inplace: bool = True
    # Pack constant GEMM weights into oneDNN's blocked layout on a background thread once the first
    # call has returned (the first calls run on them as stored), so that the first call pays
    # neither the packing nor the fresh copy's page faults. False packs them while compiling
    # (AIRGRAPH_BACKGROUND_PACKING=0). Graphs with symbolic sizes pack while compiling: their
    # programs share one packed copy.
    background_packing: bool = field(default_factory=lambda: _env("AIRGRAPH_BACKGROUND_PACKING", "1") != "0")
    # Constant GEMM weights in oneDNN's blocked layout ("packed": a copy beside the module's) or read
    # where they are (one copy): "auto" packs linear weights for GEMMs of 9-15 rows, and a graph's GEMMs of
    # 16 rows and more when their weights fit what is left of pack_budget_mb (read in place, oneDNN
    # reorders each call's weight blocks itself: single linears on a Zen 4 ran 17-49% slower at 16-32
    # rows, 10-13% at 64, 4-10% at 128, 1-6% from 256 on); the linears of a graph that does not fit and
    # the GEMVs of decode steps of up to 8 rows (each weight read once for all rows) read the module's
    # own memory. "always" packs every one with no budget (twice the weights' memory); "never" packs no
    # linear weight. Constant [K, N] matmul operands (GPT-2's Conv1D: 33% slower in place) and
    # convolution weights are always packed (AIRGRAPH_PACK_WEIGHTS). On CPUs without AVX-512, where
    # oneDNN's f32 matmul is its jit sgemm, the linears it packs (f32, up to 48 rows, N a multiple of
    # 16) run airgraph's packed small-row GEMM instead (kernels/gemm_panels.h: 1.2-1.9x oneDNN there).
    # A loaded file (airgraph.load, and export's check of the file it writes) owns its weights: no module holds
    # them, and the file stores the packed forms beside the plain ones (only the form the kernels read stays in
    # memory), so there "auto" packs every GEMM's linear weights from 9 rows up ("auto-owned": 4-11% faster
    # encoders and prefill on a Zen 4 at no memory cost); decode GEMVs still read the weights as stored.
    pack_weights: str = field(default_factory=lambda: _env("AIRGRAPH_PACK_WEIGHTS", "auto"))
    # The most MiB of linear weights pack_weights="auto" copies into packed layouts for GEMMs of 16 rows
    # and more, process-wide (a weight several graphs read counts once, while a graph holds its copy): where
    # a graph's linears' weights do not all fit what is left, it packs them a row count at a time, fewest
    # rows first, while a whole row count fits (BART-large at batch 1 packs its 32-row decoder, not its
    # 128-row encoder), and reads the rest in place (an LLM's prefill larger than the budget, one row count,
    # keeps one copy; its decode GEMVs read the weights in place anyway); its build says so at INFO. 0: one
    # copy (AIRGRAPH_PACK_BUDGET_MB).
    pack_budget_mb: int = field(default_factory=lambda: int(_env("AIRGRAPH_PACK_BUDGET_MB", "1024")))
    # Linears with int8 weights (torchao's Int8WeightOnlyConfig, _weight_int8pack_mm) or int4 ones (torchao's
    # int4 for CPU; requantized to int8 per column) and more than 8 rows (prefill, encoders): "per_row"
    # quantizes each row of the input to int8 at run time (scale = its largest magnitude / 127) and runs
    # int8 products (AVX-512 VNNI or AMX; where the CPU has neither, "off"'s path runs): 2-9x faster than
    # widening the weights (int4 at 16 rows: 1.2x), with the input's rounding to 8 bits as error
    # (docs/weights.md#int8-activations). "off" widens the weights to f32 and gives torchao's eager result
    # to f32 rounding. Decode steps of up to 8 rows with int8 weights quantize x the same way and run the
    # GEMV on int8 products (AVX-512 VNNI: 1.3x its exact GEMV); int4 decode GEMVs stay exact.
    # AIRGRAPH_INT8_ACTIVATIONS.
    int8_activations: str = field(default_factory=lambda: _env("AIRGRAPH_INT8_ACTIVATIONS", "per_row"))
    # Threads for the engine; None follows torch.get_num_threads() at each call.
    num_threads: int | None = None
    # Dynamic shapes: a graph traced with symbolic sizes keeps an engine program for each of
    # this many size bindings (the most recently used); an older size is rebuilt when it returns.
    dynamic_sizes: int = 64
    # Lower such a graph once for every size (sizes as expressions of the symbols, replayed by
    # the C++ core per size) instead of once per size; False lowers each size from the FX graph.
    lower_once: bool = True
    # The compile cache (airgraph/cache.py): an ATen graph lowered once is kept in this folder and
    # a later process compiling the same graph skips the lowering (the passes and kernels still run:
    # they depend on the weights' values, which are never cached). "" switches it off. Default:
    # $AIRGRAPH_CACHE_DIR, else $XDG_CACHE_HOME/airgraph, else ~/.cache/airgraph.
    cache_dir: str = field(default_factory=default_cache_dir)
    # Repeated blocks traced once (airgraph.cache_compile only, which controls the trace): "auto" marks
    # the layers of every nn.ModuleList of >= 2 modules of one class under the compiled module with
    # torch.compiler.nested_compile_region while Dynamo traces (the class's forward, restored after; a
    # block handed a DynamicCache gets a stand-in for its own cache layer, other caches run unmarked), so that
    # Dynamo and AOTAutograd trace one layer instead of N; the backend inlines the calls again before
    # lowering (the engine graph is the unmarked one). A marked trace that broke the graph anyway traces
    # unmarked from then on. "off" marks nothing (AIRGRAPH_REPEATED_BLOCKS). Plain torch.compile cannot
    # mark before Dynamo traces: mark the layer class yourself there
    # (docs/generation.md#repeated-blocks-traced-once-issue-37).
    repeated_blocks: str = field(default_factory=lambda: _env("AIRGRAPH_REPEATED_BLOCKS", "auto"))

    # --- debugging (README "Debugging"); each has an environment variable ---
    # Folder for graph and data dumps (AIRGRAPH_DUMP_DIR; default ./airgraph_dump).
    dump_dir: str = field(default_factory=lambda: _env("AIRGRAPH_DUMP_DIR", "airgraph_dump"))
    # Dump the FX graph received and the engine graph after each pass as text,
    # runnable Python and Graphviz DOT/SVG (AIRGRAPH_DUMP_GRAPH=1).
    dump_graph: bool = field(default_factory=lambda: _env_flag("AIRGRAPH_DUMP_GRAPH"))
    # Dump every intermediate tensor of the first call (AIRGRAPH_DUMP_DATA=1).
    dump_data: bool = field(default_factory=lambda: _env_flag("AIRGRAPH_DUMP_DATA"))
    # Regular expression on node name or op: dump only matching tensors (AIRGRAPH_DUMP_FILTER).
    dump_filter: str | None = field(default_factory=lambda: _env("AIRGRAPH_DUMP_FILTER"))
    # "npy" (one file per tensor) or "safetensors" (one file) (AIRGRAPH_DUMP_FORMAT).
    dump_format: str = field(default_factory=lambda: _env("AIRGRAPH_DUMP_FORMAT", "npy"))
    # Run the optimized ATen FX graph in PyTorch instead of the engine, to tell a
    # capture problem from an engine problem (AIRGRAPH_RUN_EAGERLY=1).
    run_eagerly: bool = field(default_factory=lambda: _env_flag("AIRGRAPH_RUN_EAGERLY"))
    # Record per-node times on every call (AIRGRAPH_PROFILE=1); see airgraph.debug.profile.
    profile: bool = field(default_factory=lambda: _env_flag("AIRGRAPH_PROFILE"))
    # Test-only: perturb the output of the engine node with this name.
    fault_node: str = ""

    def __new__(cls, *args, **kwargs):
        renamed = _renamed_message(kwargs)
        if renamed:
            raise TypeError(renamed)
        return super().__new__(cls)

    def __post_init__(self):
        check_pass_names(self.disable_passes)
        if self.pack_weights not in _PACK_ROWS:
            raise ValueError(f"pack_weights={self.pack_weights!r}: expected one of {', '.join(_PACK_ROWS)}")
        if isinstance(self.pack_budget_mb, bool) or not isinstance(self.pack_budget_mb, int) or self.pack_budget_mb < 0:
            raise ValueError(f"pack_budget_mb={self.pack_budget_mb!r}: expected a whole number of MiB, 0 or more")
        if self.repeated_blocks not in ("auto", "off"):
            raise ValueError(f"repeated_blocks={self.repeated_blocks!r}: expected 'auto' or 'off'")
        if self.int8_activations not in ("per_row", "off"):
            raise ValueError(f"int8_activations={self.int8_activations!r}: expected 'per_row' or 'off'")

    def pack_rows(self) -> int:
        """GEMMs with fewer rows than this pack their constant weights (BuildCtx::pack_rows)."""
        return _PACK_ROWS[self.pack_weights]

    def pack_budget(self) -> int:
        """Bytes: wider GEMMs pack their linear weights too while the process's copies so made stay
        within them (BuildCtx::pack_budget)."""
        return self.pack_budget_mb << 20 if self.pack_weights == "auto" else 0

    @property
    def watches_stages(self) -> bool:
        """Do the debug switches watch every stage of every graph (graph or data dumps, a fault
        injected into a node)? Then nothing is taken from the compile cache and no symbolic graph
        shares its passes between sizes: each graph runs every stage itself."""
        return bool(self.dump_graph or self.dump_data or self.fault_node)

    @classmethod
    def from_options(cls, options: dict | None) -> "CompilerConfig":
        if not options:
            return cls()
        renamed = _renamed_message(options)
        if renamed:
            raise ValueError(renamed)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(options) - names
        if unknown:
            raise ValueError(f"unknown airgraph options {sorted(unknown)}; valid: {sorted(names)}")
        return cls(**options)


_PACK_ROWS = {"auto": 16, "always": 2**63 - 1, "never": 0, "auto-owned": 2**62}


def check_pass_names(names) -> None:
    """Refuses a name in disable_passes that is no pass of the C++ pipeline (it would be ignored
    silently), and the one pass the executor needs (materialize_outputs), naming the valid ones."""
    if isinstance(names, (str, bytes)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"disable_passes takes a list of pass names, got {names!r}")
    valid = [p for p in C.pass_names() if p not in _REQUIRED_PASSES]
    bad = [n for n in names if n not in valid]
    if bad:
        required = [n for n in bad if n in _REQUIRED_PASSES]
        raise ValueError(f"disable_passes: {', '.join(map(repr, bad))} "
                         + ("cannot be switched off (the executor needs it)" if required == bad
                            else "is no pass" if len(bad) == 1 else "are no passes")
                         + f"; the passes that can be switched off are {', '.join(valid)}")


# Passes the executor relies on: always run (csrc/passes/pipeline.cpp)
_REQUIRED_PASSES = ("materialize_outputs",)

# Options that no longer exist, with what to use instead.
_RENAMED = {
    "freeze_parameters": (
        "airgraph option 'freeze_parameters' was removed; use 'frozen_parameters' (default False). Parameters and "
        "buffers are bound as constants and checked on every call, so changed weights are always seen: remove "
        "freeze_parameters. To skip the per-call checks, set frozen_parameters=True: you promise the weights never "
        "change after compiling, and a change then gives stale results with no error."
    ),
}


def _renamed_message(names) -> str:
    return "\n".join(_RENAMED[n] for n in names if n in _RENAMED)

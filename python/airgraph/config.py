"""CompilerConfig: every switch of the compiler in one object.

Pass it as `torch.compile(m, backend=airgraph.get_backend(CompilerConfig(...)))`
or as `torch.compile(m, backend="airgraph", options={...})` with the same field
names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class CompilerConfig:
    # Parameters and buffers are bound once at compile time as constants of the
    # engine graph (zero-copy) and may be folded. Set False if you mutate weights
    # in place between calls and want constant folding never to go stale.
    freeze_parameters: bool = True
    # Ops the engine cannot run are executed by PyTorch; with fallback=False an
    # unsupported op is an error instead.
    fallback: bool = True
    # Names of C++ passes to switch off (see airgraph.pass_names()), to bisect a
    # wrong result to a pass.
    disable_passes: list[str] = field(default_factory=list)
    # Largest constant (bytes) the constant folder may create.
    fold_max_bytes: int = 1 << 20
    # Let elementwise ops write over an input buffer that dies at that op.
    allow_inplace: bool = True
    # Threads for the engine; None follows torch.get_num_threads() at each call.
    num_threads: int | None = None

    @classmethod
    def from_options(cls, options: dict | None) -> "CompilerConfig":
        if not options:
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(options) - names
        if unknown:
            raise ValueError(f"unknown airgraph options {sorted(unknown)}; valid: {sorted(names)}")
        return cls(**options)

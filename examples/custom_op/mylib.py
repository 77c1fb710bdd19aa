"""A user's own op, three ways: mylib::scaled_gelu(x, scale) = gelu_tanh(x) * scale.

1. PyTorch: a torch.library custom op with a CPU kernel (and a fake kernel for tracing).
2. airgraph, from Python: a lowering that builds the op from engine ops (gelu, mul).
3. airgraph, from C++: the plugin scaled_gelu_plugin.cpp, whose kernel airgraph runs (and fuses
   into a linear layer before it); use_plugin(path) loads it and maps the torch op onto it.
"""
import torch
import torch.nn.functional as F

import airgraph


# 1. the op in PyTorch
@torch.library.custom_op("mylib::scaled_gelu", mutates_args=(), device_types="cpu")
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return F.gelu(x, approximate="tanh") * scale


@scaled_gelu.register_fake
def _(x, scale):
    return torch.empty_like(x)


# 2. its lowering into engine ops
@airgraph.register_lowering(torch.ops.mylib.scaled_gelu.default)
def lower_scaled_gelu(b, x, scale):
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise airgraph.Decline(f"scaled_gelu on {x.dtype}")  # this call stays in PyTorch
    return b.op("gelu", x, approximate="tanh") * scale


# 3. the same op as a C++ plugin
def use_plugin(path: str) -> dict:
    """Loads the plugin library and lowers the torch op onto the plugin's op from now on."""
    info = airgraph.load_library(path)

    @airgraph.register_lowering(torch.ops.mylib.scaled_gelu.default, override=True)
    def lower_to_plugin(b, x, scale):
        if x.dtype != torch.float32:
            raise airgraph.Decline(f"the plugin's kernel takes float32, not {x.dtype}")
        return b.op("mylib::scaled_gelu", x, scale=float(scale))

    return info


class Model(torch.nn.Module):
    """A linear layer followed by the custom op (the plugin's op fuses into it as its epilogue)."""

    def __init__(self, d=64):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.ops.mylib.scaled_gelu(self.up(x), 0.5))

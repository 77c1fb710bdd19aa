"""Every op family's lowering table; importing this module registers them all."""
from . import basic, elementwise, reduce, norm, matmul, shape, index, attention, vision  # noqa: F401

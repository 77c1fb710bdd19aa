"""Every op family's lowering table; importing this module registers them all."""
from . import basic, elementwise, elementwise_math, reduce, norm, matmul, shape, index, attention  # noqa: F401

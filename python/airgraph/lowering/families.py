"""Every op family's lowering table; importing this module registers them all."""
from . import basic, elementwise, reduce, norm, matmul, shape, index, attention, sort, scatter, strided, prims  # noqa: F401,E501

prims.register_copies()

"""Every op family's lowering table; importing this module registers them all."""
from . import (attention, basic, elementwise, elementwise_math, index, matmul, norm, prims, quant,  # noqa: F401
               reduce, scatter, shape, sort, strided, vision)

prims.register_copies()

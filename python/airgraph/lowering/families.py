"""Every op family's lowering table; importing this module registers them all."""
from . import (attention, basic, elementwise, index, matmul, norm, prims, reduce, scatter, shape, sort,  # noqa: F401
               strided, vision)

prims.register_copies()

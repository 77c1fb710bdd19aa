// A 1x1 convolution on channels-last bytes is a GEMM of the pixels' rows: y[m, 0:O) = b + x[m, 0:K) W,
// m over N * H * W pixels. Where K and O are small (MobileNetV2's narrow layers at 56 x 56 and more), it is
// memory-bound and oneDNN 3.2's brgconv_1x1 runs it well below the machine's rate; this kernel keeps a tile
// of output pixels in registers over the whole K, so that a block of rows is written once and the
// convolution's post-ops (kernels/epilogue.h) run on it while it is in the cache, not in a second pass
// over the whole result. f32; two widths (kernels/simd.h): AVX-512 where the CPU has it, else AVX2.
#pragma once
#include <cstdint>

#include "kernels/onednn_util.h"

namespace ag::pointwise {

struct Packed {
  dnnl_util::Buffer w, b;  // W as [K][Op] (output channels innermost, zero past O); b as [Op]
  int64_t K = 0, O = 0, Op = 0;
};

// From W as PyTorch stores it, [O][K] (f32), and an optional f32 bias [O].
Packed pack(const float* w, const float* bias, int64_t O, int64_t K);

// Output rows [m0, m1) (x: rows of K floats, y: rows of O floats). avx512: isa::use_avx512() of the call.
void rows(const Packed& p, const float* x, float* y, int64_t m0, int64_t m1, bool avx512);

}  // namespace ag::pointwise

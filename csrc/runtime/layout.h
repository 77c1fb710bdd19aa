// Channels-last activations (BuildCtx::channels_last): which values of a graph keep their bytes in
// NHWC order (for a logical [N, C, H, W]), and how the nodes around them run.
//
// oneDNN's convolutions on these CPUs run on NHWC, so every edge between a convolution and its
// neighbours in row-major NCHW costs a reorder. Values are planned in groups, not one edge at a
// time: a layout-transparent node (an elementwise op, cat, resize2d: OpDef::nhwc_view) computes
// the same on NHWC bytes as on NCHW ones, so its result and its 4-D inputs are one group that is
// channels-last or not as a whole (a ConvNeXt block's residual add, an FPN's upsample-and-add, a
// concatenation of branches). A group is channels-last where that copies fewer bytes: its members'
// writers and readers that prefer the layout (convolutions) cost a reorder each when it is
// row-major, and those that neither read nor write it cost a conversion each when it is
// channels-last (their kernels run between conversions: the region's edges). Graph inputs,
// constants and outputs, and views' sources, are row-major. Values whose two layouts are the same
// bytes (C == 1 or H * W == 1: a per-channel bias, a pooled [N, C, 1, 1]) are never marked.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/kernel.h"
#include "ir/graph.h"

namespace ag {

// One flag per value id: 1 where the value's bytes are channels-last.
std::vector<uint8_t> plan_channels_last(const Graph& g);

// The kernel of a node that touches channels-last values (BuildCtx::channels_last), where the op's
// own factory would not make it right: a layout-transparent node with a channels-last result is its
// op made for the permuted shapes ([N, H, W, C]; inputs that broadcast aligned to rank 4 first) and
// the attributes of its OpDef::nhwc_view; a node that does not read an input or write its result
// in the planned layout runs between conversions. nullptr: the op's factory makes it as usual.
std::unique_ptr<Kernel> make_layout_kernel(const Node& n, const BuildCtx& ctx);

}  // namespace ag

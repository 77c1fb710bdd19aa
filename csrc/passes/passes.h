// The pass pipeline. Each pass is one file that says what it does; each returns
// the number of changes it made. run_pipeline runs them in order, skipping the
// ones named in `disabled` (so a user can bisect a wrong result to a pass), and
// records per-pass statistics.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ag {

int canonicalize(Graph& g);        // no-op views/casts away, mm(x, permute(w)) -> linear(x, w)
int fold_constants(Graph& g, size_t max_bytes);  // run nodes whose inputs are all constant
int eliminate_common_subexpressions(Graph& g);
int eliminate_dead_code(Graph& g);
int materialize_outputs(Graph& g);
int split_batch(Graph& g);  // the early layers of a conv net at a large batch -> per group of images, concatenated
int split_concat_convs(Graph& g);  // conv over a channel cat -> a conv per part, summed (f32, >= 1024 channels)
int fold_attention_permutes(Graph& g);  // permute [0,2,1,3] around sdpa -> read/written in place by sdpa
int fuse_norms(Graph& g);        // decomposed RMSNorm (pow/mean/add eps/rsqrt/mul[/mul weight]) -> rms_norm
int fuse_rope(Graph& g);         // x * cos + cat(-x[..., h:], x[..., :h]) * sin -> rope(x, cos, sin)
int fuse_epilogues(Graph& g);     // linear/matmul/conv + bias/activation/residual add -> one oneDNN primitive
int fuse_elementwise(Graph& g);   // chains of elementwise ops -> one tiled kernel
int fuse_gathers(Graph& g);       // separable index gathers read inside the fused_elementwise node they feed  // graph outputs that are inputs/constants/duplicates get a copy

struct PassStat {
  std::string name;
  int changes = 0;
  int nodes_after = 0;
  double ms = 0;
};

struct PipelineOptions {
  std::set<std::string> disabled;  // pass names: see pass_names()
  size_t fold_max_bytes = 1 << 20;
};

// `after_pass`, when set, is called with each pass's name and the graph after it.
using AfterPassFn = std::function<void(const std::string& pass, const Graph& g)>;
std::vector<PassStat> run_pipeline(Graph& g, const PipelineOptions& opt, const AfterPassFn& after_pass = nullptr);
std::vector<std::string> pass_names();

}  // namespace ag

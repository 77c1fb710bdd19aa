// The default pipeline, in order:
//   canonicalize      first, so later passes see one form per pattern
//   fold_constants    after canonicalize (fewer, larger foldable regions)
//   cse               after folding: folded constants are compared by identity
//   dce               drops what cse and folding left unused
//   attention_permutes  after dce (use counts are final): the head split's and
//                     merge's permutes around sdpa become its operands' strides
//   split_batch       after dce: a conv net's early layers at a large batch run
//                     per group of images; before the fusions, which then fuse
//                     each group's nodes
//   split_concat_convs  after dce: a convolution over a channel concatenation
//                     becomes one per part, summed; before fuse_epilogues, which
//                     makes the sums (and what followed the convolution) epilogues
//   fuse_norms        after dce (use counts are final): a decomposed RMSNorm
//                     chain becomes one rms_norm node; before the elementwise
//                     fusions, which would otherwise split the chain up
//   fuse_rope         likewise: the rotate-half rotary embedding (slices, neg,
//                     cat, two muls, add) becomes one rope node
//   fuse_epilogues    after fuse_norms: an activation or residual
//                     add is absorbed into the GEMM/conv that feeds it
//   fuse_elementwise  after fuse_epilogues, so that it fuses only what is left
//   fuse_gathers      after fuse_elementwise: gathers feeding a fused node are
//                     read inside it (interpolation's _unsafe_index gathers)
//   materialize_outputs  last: outputs must be fresh buffers whatever came before
// verify() runs after every pass that changed the graph, so a broken pass is
// caught where it broke (a pass that reports no change left the graph as it was).
#include <algorithm>
#include <chrono>

#include "base/error.h"

#include "passes/passes.h"

namespace ag {

std::vector<std::string> pass_names() {
  return {"canonicalize", "fold_constants", "cse", "dce", "attention_permutes", "split_batch", "split_concat_convs", "fuse_norms", "fuse_rope", "fuse_epilogues", "fuse_elementwise", "fuse_gathers", "materialize_outputs"};
}

std::vector<PassStat> run_pipeline(Graph& g, const PipelineOptions& opt, const AfterPassFn& after_pass) {
  std::vector<PassStat> stats;
  const std::vector<std::string> names = pass_names();
  for (const std::string& d : opt.disabled) {
    if (std::find(names.begin(), names.end(), d) != names.end() && d != "materialize_outputs") continue;
    std::string valid;
    for (const std::string& n : names)
      if (n != "materialize_outputs") valid += (valid.empty() ? "" : ", ") + n;
    fail("disable_passes: no pass is named '", d, "'", d == "materialize_outputs" ? " that can be switched off" : "",
         " (passes: ", valid, ")");
  }
  g.verify();
  auto run = [&](const std::string& name, auto&& fn) {
    if (opt.disabled.count(name)) return;
    auto t0 = std::chrono::steady_clock::now();
    int c = fn();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (c != 0) g.verify();
    stats.push_back(PassStat{name, c, static_cast<int>(g.nodes().size()), ms});
    if (after_pass) after_pass(name, g);
  };
  run("canonicalize", [&] { return canonicalize(g); });
  run("fold_constants", [&] { return fold_constants(g, opt.fold_max_bytes); });
  run("cse", [&] {
    int c = eliminate_common_subexpressions(g);
    return c;
  });
  run("dce", [&] { return eliminate_dead_code(g); });
  run("attention_permutes", [&] { return fold_attention_permutes(g); });
  run("split_batch", [&] { return split_batch(g); });
  run("split_concat_convs", [&] { return split_concat_convs(g); });
  run("fuse_norms", [&] { return fuse_norms(g); });
  run("fuse_rope", [&] { return fuse_rope(g); });
  run("fuse_epilogues", [&] { return fuse_epilogues(g); });
  run("fuse_elementwise", [&] { return fuse_elementwise(g); });
  run("fuse_gathers", [&] { return fuse_gathers(g); });
  // Not optional: the executor relies on it.
  auto t0 = std::chrono::steady_clock::now();
  int c = materialize_outputs(g);
  if (c != 0) g.verify();
  stats.push_back(PassStat{"materialize_outputs", c, static_cast<int>(g.nodes().size()),
                           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()});
  if (after_pass) after_pass("materialize_outputs", g);
  return stats;
}

}  // namespace ag

// airgraph-run: runs an exported airgraph file on .npy inputs, without Python or
// libtorch (it links libairgraph_runtime only). Prints the outputs' dtypes and
// shapes, writes them as .npy files when asked, and with --bench times calls.
// Any error: the message on stderr and exit status 1 (2 for a bad command line).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "airgraph/runner.h"
#include "npy.h"

namespace {

const char* kUsage =
    "usage: airgraph-run MODEL [--input X.npy ...] [--output Y.npy ...] [--output-dir DIR]\n"
    "                    [--bench N] [--threads T] [--plugin LIB.so ...] [--info] [--help]\n"
    "\n"
    "Runs the airgraph file MODEL (written by airgraph's export) on .npy inputs.\n"
    "\n"
    "  --input X.npy    the next graph input, in the order --info lists them (one per input).\n"
    "                   Symbolic sizes are bound from the input shapes.\n"
    "  --output Y.npy   where to write the next output (as many as the model has outputs;\n"
    "                   '-' skips one). Without --output and --output-dir no file is written:\n"
    "                   the outputs' dtypes and shapes are printed only.\n"
    "  --output-dir DIR write every output k as DIR/out<k>.npy (when --output is not given; DIR is\n"
    "                   created if missing).\n"
    "  --bench N        after 3 warm-up calls, time N calls and print the median, p10 and p90\n"
    "                   latency in microseconds (the outputs written are the first call's).\n"
    "  --threads T      intra-op threads (OpenMP) for the calls; default: OMP_NUM_THREADS or all.\n"
    "  --plugin LIB.so  load an op plugin (include/airgraph/op_plugin.h) before the model: a model\n"
    "                   that uses a plugin's ops needs it, in the version it was exported with.\n"
    "  --info           print the model's inputs, outputs and symbols and exit (no inputs needed).\n"
    "\n"
    ".npy files: format 1.0/2.0, little-endian, C order; float32/64/16, int64/32/16/8, uint8,\n"
    "bool; bfloat16 as the airgraph extension descr 'bfloat16' (numpy cannot load those).\n"
    "Inputs the model writes (a KV cache) are updated in memory only; their files stay as they were.\n";

struct Usage {
  std::string msg;
};

struct Args {
  std::string model;
  std::vector<std::string> inputs, outputs, plugins;
  std::string output_dir;
  int bench = 0, threads = 0;
  bool info = false;
};

long parse_int(const std::string& flag, const char* s, long lo) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo) throw Usage{flag + " takes an integer >= " + std::to_string(lo) + ", got '" + s + "'"};
  return v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw Usage{f + " needs a value"};
      return argv[++i];
    };
    if (f == "--help" || f == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (f == "--input") {
      a.inputs.push_back(value());
    } else if (f == "--output") {
      a.outputs.push_back(value());
    } else if (f == "--output-dir") {
      a.output_dir = value();
    } else if (f == "--bench") {
      a.bench = static_cast<int>(parse_int(f, value(), 1));
    } else if (f == "--threads") {
      a.threads = static_cast<int>(parse_int(f, value(), 1));
    } else if (f == "--plugin") {
      a.plugins.push_back(value());
    } else if (f == "--info") {
      a.info = true;
    } else if (!f.empty() && f[0] == '-') {
      throw Usage{"unknown option " + f};
    } else if (a.model.empty()) {
      a.model = f;
    } else {
      throw Usage{"one model only (got '" + a.model + "' and '" + f + "'); inputs are given with --input"};
    }
  }
  if (a.model.empty()) throw Usage{"no model file given"};
  return a;
}

void print_info(const airgraph::Model& m) {
  std::printf("model: %s\n", m.producer().empty() ? "(no producer recorded)" : m.producer().c_str());
  std::printf("symbols:");
  if (m.symbols().empty()) std::printf(" (none: static shapes)");
  for (const auto& s : m.symbols()) std::printf(" %s", s.c_str());
  std::printf("\ninputs:\n");
  for (size_t i = 0; i < m.inputs().size(); ++i) {
    const auto& t = m.inputs()[i];
    std::printf("  %zu  %s", i, t.str().c_str());
    if (t.written_by_output >= 0) std::printf("  (written: holds output %d after a call)", t.written_by_output);
    std::printf("\n");
  }
  std::printf("outputs:\n");
  for (size_t i = 0; i < m.outputs().size(); ++i) std::printf("  %zu  %s\n", i, m.outputs()[i].str().c_str());
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int run(const Args& a) {
  for (const std::string& p : a.plugins) std::fprintf(stderr, "airgraph-run: plugin %s\n", airgraph::load_plugin(p).c_str());
  airgraph::Model m = airgraph::Model::load(a.model);
  if (a.info) {
    print_info(m);
    return 0;
  }
  if (a.inputs.size() != m.inputs().size()) {
    std::string want;
    for (const auto& t : m.inputs()) want += "\n  " + t.str();
    throw airgraph::Error("the model takes " + std::to_string(m.inputs().size()) + " inputs, got " +
                          std::to_string(a.inputs.size()) + " --input files; its inputs:" + want);
  }
  if (!a.outputs.empty() && a.outputs.size() != m.outputs().size())
    throw airgraph::Error("the model has " + std::to_string(m.outputs().size()) + " outputs, got " +
                          std::to_string(a.outputs.size()) + " --output paths (use '-' to skip one)");
  std::vector<airgraph::npy::Array> arrays;
  std::vector<airgraph::TensorRef> refs;
  for (const auto& path : a.inputs) {
    arrays.push_back(airgraph::npy::read(path));
    refs.push_back(airgraph::TensorRef{arrays.back().data.get(), arrays.back().dtype, arrays.back().shape});
  }
  if (!a.output_dir.empty()) {  // created if missing, as `mkdir -p` would
    std::error_code ec;
    std::filesystem::create_directories(a.output_dir, ec);
    if (ec) throw airgraph::Error("--output-dir " + a.output_dir + ": cannot create it: " + ec.message());
  }
  // with --bench, the written inputs change every call: keep the outputs of the first
  std::vector<airgraph::Tensor> outs = m.run(refs, a.threads);
  for (size_t k = 0; k < outs.size(); ++k) {
    const auto& t = outs[k];
    std::printf("output %zu  %s: %s%s%s\n", k, m.outputs()[k].name.c_str(), airgraph::dtype_name(t.dtype()),
                shape_str(t.shape()).c_str(), t.written_input() >= 0 ? "  (computed in its input)" : "");
    std::string path = k < a.outputs.size() ? a.outputs[k]
                       : !a.output_dir.empty() ? a.output_dir + "/out" + std::to_string(k) + ".npy"
                                               : "-";
    if (path != "-") airgraph::npy::write(path, t.dtype(), t.shape(), t.data(), t.nbytes());
  }
  if (a.bench > 0) {
    using clk = std::chrono::steady_clock;
    for (int i = 0; i < 3; ++i) m.run(refs, a.threads);
    std::vector<double> us(a.bench);
    for (int i = 0; i < a.bench; ++i) {
      auto t0 = clk::now();
      m.run(refs, a.threads);
      us[i] = std::chrono::duration<double, std::micro>(clk::now() - t0).count();
    }
    std::sort(us.begin(), us.end());
    auto pct = [&](double p) { return us[std::min<size_t>(us.size() - 1, static_cast<size_t>(p * (us.size() - 1) + 0.5))]; };
    std::printf("bench: %d calls, median %.1f us, p10 %.1f us, p90 %.1f us\n", a.bench, pct(0.5), pct(0.1), pct(0.9));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const Usage& u) {
    std::fprintf(stderr, "airgraph-run: %s\n\n%s", u.msg.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airgraph-run: error: %s\n", e.what());
    return 1;
  }
}

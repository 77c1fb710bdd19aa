// run_model: loads an airgraph file, fills every input with a ramp (a dim that is a
// symbol gets size 2), runs it and prints the first values of each output. It uses
// only the public header <airgraph/runner.h> and libairgraph_runtime.so.
//
// Build against an installed package (pip install . puts airgraph-run in <venv>/bin,
// libairgraph_runtime.so beside the onednn wheel's libdnnl.so.3 in <venv>/lib, and
// the header in site-packages/airgraph/include):
//   V=$(python -c 'import sys; print(sys.prefix)')
//   INC=$(python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/airgraph/include
//   g++ -std=c++17 run_model.cpp -I"$INC" -L"$V/lib" -lairgraph_runtime -Wl,-rpath,"$V/lib" -o run_model
//   ./run_model model.airgraph
// (In this repository CMake builds it as the target airgraph_example_run_model.)
#include <airgraph/runner.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL\n", argv[0]);
    return 2;
  }
  try {
    airgraph::Model model = airgraph::Model::load(argv[1]);
    std::vector<std::vector<char>> buffers;
    std::vector<airgraph::TensorRef> inputs;
    for (const airgraph::TensorInfo& info : model.inputs()) {
      airgraph::TensorRef in;
      in.dtype = info.dtype;
      int64_t n = 1;
      for (int64_t d : info.shape) in.shape.push_back(d < 0 ? 2 : d), n *= in.shape.back();
      buffers.emplace_back(n * airgraph::dtype_size(info.dtype), 0);
      if (info.dtype == airgraph::DType::float32)
        for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(buffers.back().data())[i] = 0.1f * i;
      in.data = buffers.back().data();
      inputs.push_back(in);
      std::printf("input  %s\n", info.str().c_str());
    }
    std::vector<airgraph::Tensor> outputs = model.run(inputs);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const airgraph::Tensor& t = outputs[k];
      std::printf("output %s -> %s[", model.outputs()[k].str().c_str(), airgraph::dtype_name(t.dtype()));
      for (size_t d = 0; d < t.shape().size(); ++d) std::printf(d ? ", %lld" : "%lld", (long long)t.shape()[d]);
      std::printf("]");
      if (t.dtype() == airgraph::DType::float32)
        for (int64_t i = 0; i < t.numel() && i < 6; ++i) std::printf(" %g", t.data_as<float>()[i]);
      std::printf("\n");
    }
  } catch (const airgraph::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

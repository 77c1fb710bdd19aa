// Issue 35, item 2: does a blocked activation layout (nChw16c) beat NHWC for the zoo's convolutions
// on this CPU? For each shape, oneDNN's f32 forward-inference convolution (batch 1, bias, "same"
// padding) is built twice: with source and destination pinned to NHWC (what airgraph runs), and with
// format_tag::any (the primitive picks its preferred layout). Prints one line per shape:
//   name <tab> nhwc us <tab> nhwc impl <tab> any us <tab> any impl <tab> any's layouts
// (the best of 7 blocks of >= 50 ms, after a warm-up). Built and run by bench/conv_layouts.py.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

struct Shape {
  std::string name;
  int C, O, H, k, s, g;
};

std::string layout(const memory::desc& d) {
  if (d.get_inner_nblks() > 0) return "blocked(" + std::to_string(d.get_inner_blks()[0]) + "c)";
  return d.get_strides()[1] == 1 ? "nhwc" : "nchw";
}

double time_us(engine& eng, stream& st, const Shape& c, bool any, std::string* impl) {
  const int p = c.k / 2, Ho = (c.H + 2 * p - c.k) / c.s + 1;
  memory::dims x{1, c.C, c.H, c.H}, o{1, c.O, Ho, Ho};
  memory::dims w = c.g > 1 ? memory::dims{c.g, c.O / c.g, c.C / c.g, c.k, c.k} : memory::dims{c.O, c.C, c.k, c.k};
  const tag a = any ? tag::any : tag::nhwc;
  auto pd = convolution_forward::primitive_desc(
      eng, prop_kind::forward_inference, algorithm::convolution_direct, memory::desc(x, dt::f32, a),
      memory::desc(w, dt::f32, tag::any), memory::desc({c.O}, dt::f32, tag::x), memory::desc(o, dt::f32, a),
      {c.s, c.s}, {p, p}, {p, p});
  *impl = pd.impl_info_str();
  if (any) *impl += "\t" + layout(pd.src_desc()) + " -> " + layout(pd.dst_desc());
  memory xm(pd.src_desc(), eng), wm(pd.weights_desc(), eng), bm(pd.bias_desc(), eng), om(pd.dst_desc(), eng);
  for (memory* m : {&xm, &wm, &bm}) {
    float* f = static_cast<float*>(m->get_data_handle());
    for (size_t i = 0, n = m->get_desc().get_size() / 4; i < n; ++i) f[i] = 0.01f * static_cast<float>(i % 97);
  }
  convolution_forward prim(pd);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, om}};
  for (int i = 0; i < 5; ++i) prim.execute(st, args);
  st.wait();
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    int n = 0;
    double el = 0;
    const auto t0 = std::chrono::steady_clock::now();
    do {
      prim.execute(st, args);
      st.wait();
      ++n;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < 0.05);
    best = std::min(best, el / n);
  }
  return best * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  // ResNet-50 (224 x 224) and MobileNetV2 (224 x 224): every distinct convolution shape of a block
  // kind; name, in channels, out channels, input size, kernel, stride, groups
  const std::vector<Shape> shapes = {
      {"resnet50 stem 3-64 7x7/2 @224", 3, 64, 224, 7, 2, 1},
      {"resnet50 64-64 1x1 @56", 64, 64, 56, 1, 1, 1},
      {"resnet50 64-64 3x3 @56", 64, 64, 56, 3, 1, 1},
      {"resnet50 64-256 1x1 @56", 64, 256, 56, 1, 1, 1},
      {"resnet50 256-64 1x1 @56", 256, 64, 56, 1, 1, 1},
      {"resnet50 256-128 1x1 @56", 256, 128, 56, 1, 1, 1},
      {"resnet50 128-128 3x3/2 @56", 128, 128, 56, 3, 2, 1},
      {"resnet50 128-128 3x3 @28", 128, 128, 28, 3, 1, 1},
      {"resnet50 128-512 1x1 @28", 128, 512, 28, 1, 1, 1},
      {"resnet50 512-128 1x1 @28", 512, 128, 28, 1, 1, 1},
      {"resnet50 256-256 3x3 @14", 256, 256, 14, 3, 1, 1},
      {"resnet50 256-1024 1x1 @14", 256, 1024, 14, 1, 1, 1},
      {"resnet50 1024-256 1x1 @14", 1024, 256, 14, 1, 1, 1},
      {"resnet50 512-512 3x3 @7", 512, 512, 7, 3, 1, 1},
      {"resnet50 512-2048 1x1 @7", 512, 2048, 7, 1, 1, 1},
      {"resnet50 2048-512 1x1 @7", 2048, 512, 7, 1, 1, 1},
      {"mobilenetv2 stem 3-32 3x3/2 @224", 3, 32, 224, 3, 2, 1},
      {"mobilenetv2 dw32 3x3 @112", 32, 32, 112, 3, 1, 32},
      {"mobilenetv2 32-16 1x1 @112", 32, 16, 112, 1, 1, 1},
      {"mobilenetv2 16-96 1x1 @112", 16, 96, 112, 1, 1, 1},
      {"mobilenetv2 dw96 3x3/2 @112", 96, 96, 112, 3, 2, 96},
      {"mobilenetv2 96-24 1x1 @56", 96, 24, 56, 1, 1, 1},
      {"mobilenetv2 24-144 1x1 @56", 24, 144, 56, 1, 1, 1},
      {"mobilenetv2 dw144 3x3 @56", 144, 144, 56, 3, 1, 144},
      {"mobilenetv2 144-24 1x1 @56", 144, 24, 56, 1, 1, 1},
      {"mobilenetv2 dw192 3x3 @28", 192, 192, 28, 3, 1, 192},
      {"mobilenetv2 192-32 1x1 @28", 192, 32, 28, 1, 1, 1},
      {"mobilenetv2 32-192 1x1 @28", 32, 192, 28, 1, 1, 1},
      {"mobilenetv2 dw384 3x3 @14", 384, 384, 14, 3, 1, 384},
      {"mobilenetv2 384-64 1x1 @14", 384, 64, 14, 1, 1, 1},
      {"mobilenetv2 64-384 1x1 @14", 64, 384, 14, 1, 1, 1},
      {"mobilenetv2 dw576 3x3 @14", 576, 576, 14, 3, 1, 576},
      {"mobilenetv2 576-96 1x1 @14", 576, 96, 14, 1, 1, 1},
      {"mobilenetv2 dw960 3x3 @7", 960, 960, 7, 3, 1, 960},
      {"mobilenetv2 960-160 1x1 @7", 960, 160, 7, 1, 1, 1},
      {"mobilenetv2 160-960 1x1 @7", 160, 960, 7, 1, 1, 1},
      {"mobilenetv2 320-1280 1x1 @7", 320, 1280, 7, 1, 1, 1},
      {"upernet fpn_bottleneck 1024-256 3x3 @64", 1024, 256, 64, 3, 1, 1},
      {"upernet fpn 256-256 3x3 @64", 256, 256, 64, 3, 1, 1},
      {"upernet psp bottleneck 1792-256 3x3 @8", 1792, 256, 8, 3, 1, 1},
  };
  const char* only = argc > 1 ? argv[1] : nullptr;  // a substring of the names to run
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  for (const Shape& s : shapes) {
    if (only && s.name.find(only) == std::string::npos) continue;
    std::string in, ia;
    // NHWC before and after "any" (the VM drifts): the better of the two
    const double a0 = time_us(eng, st, s, false, &in), b = time_us(eng, st, s, true, &ia),
                 a1 = time_us(eng, st, s, false, &in);
    std::printf("%s\t%.1f\t%s\t%.1f\t%s\n", s.name.c_str(), std::min(a0, a1), in.c_str(), b, ia.c_str());
    std::fflush(stdout);
  }
  return 0;
}

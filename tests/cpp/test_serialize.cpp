// The airgraph file (ir/serialize): a graph saved and loaded is the same graph
// (text, symbols, constants, input writes) and computes the same result; and
// the loader survives hostile bytes: every truncation, bit flips with the
// checksums left (caught by them) and with the checksums recomputed (caught by
// the parser and the builder), overwritten words, wrong versions, absurd counts
// and offsets. Each case must end in ag::Error or a graph that verifies; a
// crash or an out-of-bounds read fails the test (the sanitizer build runs it
// too: scripts/sanitize.sh).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/error.h"
#include "ir/graph.h"
#include "ir/serialize.h"
#include "sample_graphs.h"
#include "check_op.h"

namespace ag {
namespace {

using test::attrs;

// A small symbolic graph with every kind of content: a symbol and expressions, an input with a
// symbolic dim, constants, a node with a symbolic attribute, attributes of several types, a
// source line, an input the graph writes.
std::unique_ptr<Graph> sample_graph() { return test::symbolic_sample_graph(false); }

std::vector<float> run_at(const Graph& sym, int64_t s0, std::vector<float>* state_out) {
  auto g = sym.instantiate({s0});
  std::vector<float> x(s0 * 4), state{1, 2, 3, 4};
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.f * i : 0.25f * i;
  const PipelineOptions passes;
  auto r = test::compile_and_run(*g, {x.data(), state.data()}, &passes);
  *state_out = r.outs[1].vec<float>();
  return r.outs[0].vec<float>();
}

TEST(GraphFile, SavedAndLoadedGraphIsTheSameAndComputesTheSame) {
  auto g = sample_graph();
  std::string bytes = save_graph(*g, SaveOptions{true, "test", "{\"k\": 1}"});
  auto loaded = load_graph(bytes.data(), bytes.size(), nullptr, nullptr);
  EXPECT_EQ(loaded.producer, "test");
  EXPECT_EQ(loaded.metadata, "{\"k\": 1}");
  EXPECT_EQ(loaded.graph->str(), g->str());
  EXPECT_TRUE(loaded.graph->is_symbolic());
  ASSERT_EQ(loaded.graph->input_writes().size(), 1u);
  for (int64_t s : {1, 3, 5}) {
    std::vector<float> st_a, st_b;
    EXPECT_EQ(run_at(*loaded.graph, s, &st_b), run_at(*g, s, &st_a)) << "s0=" << s;
    EXPECT_EQ(st_a, st_b);
  }
  // saved again, the same bytes
  EXPECT_EQ(save_graph(*loaded.graph, SaveOptions{true, "test", "{\"k\": 1}"}), bytes);
}

// The compile cache's check of folded weights: the same bytes anywhere give the same checksum; a
// flipped bit in either lane, in the tail or a change of length gives another.
TEST(Checksum64, SeesEveryLaneTheTailAndTheLength) {
  std::vector<uint8_t> a(1000 + 64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> b(a.begin() + 32, a.begin() + 32 + 1000), c(b);
  const uint64_t base = checksum64(b.data(), b.size());
  EXPECT_EQ(checksum64(a.data() + 32, 1000), base);  // (another address, unaligned)
  std::vector<uint64_t> seen{base};
  for (size_t at : {size_t{3}, size_t{8 + 5}, size_t{993}}) {  // lane a, lane b, the tail
    c = b;
    c[at] ^= 0x10;
    const uint64_t x = checksum64(c.data(), c.size());
    for (uint64_t y : seen) EXPECT_NE(x, y) << at;
    seen.push_back(x);
  }
  EXPECT_NE(checksum64(b.data(), 999), base);
  EXPECT_EQ(checksum64(nullptr, 0), checksum64(b.data(), 0));
}

TEST(GraphFile, EmptyConstantsRoundTrip) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {2, 3}), "x");
  Value* e = g.add_const(TensorType(DType::f32, {2, 0}), std::make_shared<Storage>(), "empty");
  Node* c = g.add_node("cat", {x, e}, attrs({{"dim", int64_t{1}}}), "c");
  g.set_outputs({c->out()});
  std::string bytes = save_graph(g, SaveOptions{});
  auto loaded = load_graph(bytes.data(), bytes.size(), nullptr, nullptr);
  EXPECT_EQ(loaded.graph->str(), g.str());
}

// Blobs (version 3): bytes tied to an inline constant under a key come back with the address of
// their constant's bytes when the file is served in place; a flipped byte in one is caught by its
// checksum; a blob of a constant the graph lacks (or has by name only) is left out when saving.
TEST(GraphFile, BlobsComeBackBesideTheirConstant) {
  auto g = sample_graph();
  const std::vector<uint8_t> packed(100, 7);
  SaveOptions o{true, "test", ""};
  o.blobs = {{"weight", "packed as f32 [4]", packed.data(), packed.size()},
             {"no such constant", "dropped", packed.data(), packed.size()}};
  std::string bytes = save_graph(*g, o);
  auto buf = Storage::allocate(bytes.size());  // (64-byte aligned: constants and blobs served in place)
  std::memcpy(buf->data, bytes.data(), bytes.size());
  std::shared_ptr<void> keep(buf, buf->data);
  auto loaded = load_graph(buf->data, bytes.size(), keep, nullptr);
  ASSERT_EQ(loaded.blobs.size(), 1u);
  const auto& b = loaded.blobs[0];
  EXPECT_EQ(b.key, "packed as f32 [4]");
  ASSERT_EQ(b.nbytes, packed.size());
  EXPECT_EQ(std::memcmp(b.data, packed.data(), packed.size()), 0);
  const Value* w = nullptr;
  for (int i = 0; i < loaded.graph->num_values(); ++i)
    if (loaded.graph->value(i)->name == "weight") w = loaded.graph->value(i);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(b.src, w->storage->data);
  EXPECT_EQ(loaded.keep, keep);
  // a flipped byte of the blob (the last bytes of the data section)
  size_t at = bytes.size() - 1;
  while (static_cast<uint8_t>(bytes[at]) != 7) --at;
  bytes[at] ^= 1;
  try {
    load_graph(bytes.data(), bytes.size(), nullptr, nullptr);
    ADD_FAILURE() << "a corrupt blob was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blob 'packed as f32 [4]'"), std::string::npos) << e.what();
  }
  // not served in place (no keep): no blobs, the graph still loads
  bytes[at] ^= 1;
  EXPECT_TRUE(load_graph(bytes.data(), bytes.size(), nullptr, nullptr).blobs.empty());
}

TEST(GraphFile, ConstantsByNameComeFromTheResolver) {
  auto g = sample_graph();
  std::string bytes = save_graph(*g, SaveOptions{false, "", ""});
  EXPECT_THROW(load_graph(bytes.data(), bytes.size(), nullptr, nullptr), Error);  // no resolver
  auto other = Storage::allocate(4 * sizeof(float));
  for (int i = 0; i < 4; ++i) static_cast<float*>(other->data)[i] = -1.f;
  std::vector<std::string> asked;
  auto loaded = load_graph(bytes.data(), bytes.size(), nullptr, [&](const std::string& name, const TensorType& t) {
    asked.push_back(name + ":" + t.str());
    return other;
  });
  EXPECT_EQ(asked, std::vector<std::string>{"weight:float32[4]"});
  std::vector<float> st;
  run_at(*loaded.graph, 2, &st);
  EXPECT_EQ(st, (std::vector<float>{-1.f, 0.f, 1.f, 2.f}));  // state + 2 * weight, with the resolver's weight
  EXPECT_THROW(load_graph(bytes.data(), bytes.size(), nullptr,
                          [](const std::string&, const TensorType&) { return std::shared_ptr<Storage>(); }),
               Error);
}

TEST(GraphFile, WrongVersionAndForeignBytesAreRefusedWithAClearMessage) {
  std::string bytes = save_graph(*sample_graph(), SaveOptions{});
  auto expect_error = [](const std::string& b, const char* want) {
    try {
      load_graph(b.data(), b.size(), nullptr, nullptr);
      ADD_FAILURE() << "expected an error containing " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  std::string v2 = bytes;
  uint32_t ver = kGraphFileVersion + 1;
  std::memcpy(&v2[8], &ver, 4);
  uint32_t crc = crc32c(v2.data(), 60);
  std::memcpy(&v2[60], &crc, 4);
  expect_error(v2, "format version");
  expect_error(std::string(100, 'x'), "not an airgraph file");
  expect_error(bytes.substr(0, 10), "shorter than");
  expect_error(bytes.substr(0, bytes.size() - 1), "do not fit");
}

// Recomputes the header's and the metadata's checksums so that a mutation reaches the parser.
void fix_checksums(std::string& b) {
  if (b.size() < 64) return;
  uint64_t meta_off, meta_len;
  std::memcpy(&meta_off, &b[16], 8);
  std::memcpy(&meta_len, &b[24], 8);
  if (meta_off == 64 && meta_len <= b.size() - 64) {
    uint32_t mc = crc32c(b.data() + 64, meta_len);
    std::memcpy(&b[48], &mc, 4);
  }
  uint32_t hc = crc32c(b.data(), 60);
  std::memcpy(&b[60], &hc, 4);
}

// Loads hostile bytes from a buffer of exactly their size; anything but ag::Error or a verified
// graph fails. Returns whether it loaded.
bool survives(const std::string& b, int* loaded) {
  std::unique_ptr<char[]> exact(new char[b.size() + 1]);
  std::memcpy(exact.get(), b.data(), b.size());
  try {
    auto g = load_graph(exact.get(), b.size(), nullptr, [](const std::string&, const TensorType& t) {
      return Storage::allocate(std::min<size_t>(t.nbytes(), 1 << 20));
    });
    g.graph->verify();
    ++*loaded;
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(GraphFileFuzz, HostileBytesGiveErrorsNeverCrashes) {
  std::string good = save_graph(*sample_graph(), SaveOptions{true, "fuzz", "{}"});
  std::mt19937 rng(7);
  int cases = 0, loaded = 0;
  // every truncation
  for (size_t n = 0; n < good.size(); ++n, ++cases) EXPECT_FALSE(survives(good.substr(0, n), &loaded)) << n;
  // random bit flips: the checksums catch those in the header, the metadata and the constants
  // (a flip in the padding before the data section changes nothing)
  uint64_t meta_len;
  std::memcpy(&meta_len, &good[24], 8);
  for (int i = 0; i < 2000; ++i, ++cases) {
    std::string b = good;
    size_t pos = rng() % b.size();
    b[pos] ^= static_cast<char>(1u << (rng() % 8));
    bool covered = pos < 64 + meta_len || pos >= good.size() - 4 * sizeof(float);
    if (covered) EXPECT_FALSE(survives(b, &loaded)) << "flip at " << pos;
    else survives(b, &loaded);
  }
  // bit flips, byte and word overwrites with the checksums recomputed: the parser's checks
  const int64_t absurd[] = {-1, 0, 1, 0x7fffffff, int64_t(0xffffffff), int64_t(1) << 40, INT64_MAX, INT64_MIN};
  for (int i = 0; i < 6000; ++i, ++cases) {
    std::string b = good;
    size_t pos = 8 + rng() % (b.size() - 8);
    switch (i % 3) {
      case 0: b[pos] ^= static_cast<char>(1u << (rng() % 8)); break;
      case 1: b[pos] = static_cast<char>(rng()); break;
      default: {
        int64_t v = absurd[rng() % std::size(absurd)];
        size_t k = (rng() % 2) ? 4 : 8;
        if (pos + k <= b.size()) std::memcpy(&b[pos], &v, k);
      }
    }
    fix_checksums(b);
    survives(b, &loaded);
  }
  // random garbage behind a valid header
  for (int i = 0; i < 500; ++i, ++cases) {
    std::string b = good.substr(0, 64) + std::string(rng() % 512, '\0');
    for (size_t k = 64; k < b.size(); ++k) b[k] = static_cast<char>(rng());
    fix_checksums(b);
    EXPECT_FALSE(survives(b, &loaded));
  }
  EXPECT_GE(cases, 8000);
  std::printf("airgraph file fuzz: %d cases, %d loaded (harmless mutations), the rest refused with ag::Error\n",
              cases, loaded);
}

}  // namespace
}  // namespace ag

// docs/guide.md, "Foreign checkpoints". The lines between two `// [name]` markers are the guide's
// code block `foreign.cpp#name` (tests/test_docs.cpp checks that the guide shows them unchanged);
// the test cases below run them. The PyTorch walk-through is examples/load_pytorch/main.cpp.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

// A checkpoint laid out as PyTorch's torch.nn.TransformerEncoder names its first attention
// layer: the fused query/key/value projection `in_proj_weight` [3 d, d] and its bias in BF16,
// and a step counter.
ckpt::checkpoint torch_like(int d) {
  const Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> qkv =
      Eigen::MatrixXf::Random(3 * d, d).cast<Eigen::bfloat16>();
  return ckpt::concat({ckpt::of_params(qkv, "encoder.layers.0.self_attn.in_proj_weight"),
                       ckpt::of_params(Eigen::VectorX<Eigen::bfloat16>::Zero(3 * d).eval(),
                                       "encoder.layers.0.self_attn.in_proj_bias"),
                       ckpt::of_int("global_step", 1000)})
      .with_metadata({{"format", "pt"}});
}

// [adapters]
struct attention {
  Eigen::MatrixXf q, k, v;  // [d, d] each
};

attention load_attention(const ckpt::checkpoint& foreign, int d) {
  ckpt::checkpoint t = ckpt::rename(foreign, [](std::string_view name) {
    constexpr std::string_view layer = "encoder.layers.0.self_attn.";  // -> in_proj_weight, ...
    return std::string(name.starts_with(layer) ? name.substr(layer.size()) : name);
  });
  // The fused projection stacks q, k and v along its first axis: three [d, d] views, no copy.
  t = ckpt::split(t, "in_proj_weight", {"q", "k", "v"});
  t = ckpt::cast(t, ckpt::dtype::f32);  // BF16 -> F32; global_step (I32) keeps its dtype
  const Eigen::MatrixXf square(d, d);
  return ckpt::to_params(t, attention{square, square, square});
}
// [adapters]

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_foreign)

BOOST_AUTO_TEST_CASE(adapters_turn_a_fused_bf16_projection_into_three_matrices) {
  const int d = 4;
  const ckpt::checkpoint foreign = torch_like(d);
  const attention a = load_attention(foreign, d);
  const auto qkv = ckpt::matrix_view<Eigen::bfloat16>(foreign.get("encoder.layers.0.self_attn.in_proj_weight"));
  for (int r = 0; r < d; ++r)
    for (int c = 0; c < d; ++c) {
      BOOST_TEST(a.q(r, c) == static_cast<float>(qkv(r, c)));
      BOOST_TEST(a.k(r, c) == static_cast<float>(qkv(d + r, c)));
      BOOST_TEST(a.v(r, c) == static_cast<float>(qkv(2 * d + r, c)));
    }
}

BOOST_AUTO_TEST_CASE(sharded_checkpoints_load_as_one) {
  const ckpt::checkpoint t = torch_like(64);  // 24 KiB of BF16 weights, 384 bytes of bias
  // [sharded]
  // model-00001-of-0000N.safetensors, ... and model.safetensors.index.json, at most 16 KiB of
  // tensor data per shard (an entry larger than that gets a shard of its own).
  const ckpt::sharded_files files = ckpt::save_sharded("exported", t, 16 * 1024);
  // The folder, or its index file: one checkpoint over every shard, each mapped lazily.
  const ckpt::checkpoint back = ckpt::load("exported");
  // [sharded]
  BOOST_TEST(files.index == std::filesystem::path("exported/model.safetensors.index.json"));
  // The weight (24 KiB, over the limit) gets a shard of its own; the bias (384 bytes) and
  // global_step share the other.
  BOOST_TEST(files.shards.size() == 2u);
  BOOST_TEST(files.shards.at(0) == std::filesystem::path("exported/model-00001-of-00002.safetensors"));
  BOOST_TEST(ckpt::load(files.shards.at(0)).names() ==
             (std::vector<std::string>{"encoder.layers.0.self_attn.in_proj_weight"}));
  BOOST_TEST(ckpt::load(files.shards.at(1)).names() ==
             (std::vector<std::string>{"encoder.layers.0.self_attn.in_proj_bias", "global_step"}));
  BOOST_TEST(back.names() == t.names());
  for (const auto& [name, x] : t) BOOST_TEST((back.get(name) == x), name);
  BOOST_TEST(ckpt::load("exported/model.safetensors.index.json").names() == t.names());
  BOOST_TEST(back.metadata().at("format") == "pt");
}

BOOST_AUTO_TEST_SUITE_END()

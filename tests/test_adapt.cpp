// The checkpoint-to-checkpoint adapters for foreign weights: rename, transpose, split, cast.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/detail/pages.hpp>
#include <ckpt/adapt.hpp>
#include <ckpt/file.hpp>
#include <ckpt/params.hpp>

#include <Eigen/Core>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_adapt)

namespace {

using ckpt_test::floats;
using ckpt_test::message_of;

ckpt::dims shape_of(const ckpt::tensor& x) { return {x.shape().begin(), x.shape().end()}; }

// A tensor of `shape` whose elements of `type` (whole bytes) are numbered 0, 1, 2... in their
// first byte, with the element's index spread over its other bytes, so that each element is
// distinct and a misplaced byte shows.
ckpt::tensor numbered(ckpt::dtype type, ckpt::dims shape) {
  return ckpt::tensor::make(type, std::move(shape), [type](std::span<std::byte> out) {
    const std::size_t size = ckpt::detail::bit_width(type) / 8;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>((i / size) * 7 + i % size);
  });
}

// A 0, 1, 2... F32 tensor of `shape`.
ckpt::tensor iota(ckpt::dims shape) {
  return ckpt::tensor::make(ckpt::dtype::f32, std::move(shape), [](std::span<std::byte> out) {
    std::vector<float> v(out.size() / sizeof(float));
    std::iota(v.begin(), v.end(), 0.0f);
    std::memcpy(out.data(), v.data(), out.size());
  });
}

const ckpt::metadata_map some_metadata{{"format", "pt"}, {"source", "torch"}};

}  // namespace

BOOST_AUTO_TEST_SUITE(rename_entries)

BOOST_AUTO_TEST_CASE(renames_every_entry_and_shares_the_tensors) {
  const ckpt::checkpoint t(
      {{"model.encoder.w", floats({1, 2})}, {"model.encoder.b", floats({3})}, {"step", floats({4})}}, some_metadata);
  const ckpt::checkpoint r = ckpt::rename(t, [](std::string_view n) {
    return n.starts_with("model.") ? "net." + std::string(n.substr(6)) : std::string(n);
  });
  BOOST_TEST(r.names() == (std::vector<std::string>{"net.encoder.b", "net.encoder.w", "step"}));
  BOOST_TEST(r.get("net.encoder.w").bytes().data() == t.get("model.encoder.w").bytes().data());
  BOOST_TEST(r.get("step").bytes().data() == t.get("step").bytes().data());
  BOOST_TEST(r.metadata() == some_metadata);
  // The input is untouched.
  BOOST_TEST(t.names() == (std::vector<std::string>{"model.encoder.b", "model.encoder.w", "step"}));
}

BOOST_AUTO_TEST_CASE(two_entries_renamed_alike_are_refused_naming_both) {
  const ckpt::checkpoint t({{"a.w", floats({1})}, {"b.w", floats({2})}});
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               static_cast<void>(ckpt::rename(t, [](std::string_view n) { return std::string(n.substr(2)); }));
             }) == "ckpt: rename: entries 'a.w' and 'b.w' are both renamed to 'w'");
}

BOOST_AUTO_TEST_CASE(empty_and_reserved_names_are_refused) {
  const ckpt::checkpoint t({{"w", floats({1})}});
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               static_cast<void>(ckpt::rename(t, [](std::string_view) { return std::string(); }));
             }) == "ckpt: rename: entry 'w' is renamed to the empty name");
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               static_cast<void>(ckpt::rename(t, [](std::string_view) { return std::string("__metadata__"); }));
             }) == "ckpt: rename: entry 'w' is renamed to '__metadata__', which the format reserves");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(transpose_entry)

// The reference: element (b, r, c) of a [batch, rows, cols] tensor moves to (b, c, r).
void check_transposed(const ckpt::tensor& in, const ckpt::tensor& out) {
  const std::size_t rank = in.rank();
  const auto rows = static_cast<std::size_t>(in.shape()[rank - 2]);
  const auto cols = static_cast<std::size_t>(in.shape()[rank - 1]);
  const std::size_t size = ckpt::detail::bit_width(in.dtype()) / 8;
  std::size_t batch = 1;
  for (std::size_t i = 0; i + 2 < rank; ++i) batch *= static_cast<std::size_t>(in.shape()[i]);
  ckpt::dims expected_shape = shape_of(in);
  std::swap(expected_shape[rank - 2], expected_shape[rank - 1]);
  BOOST_TEST(shape_of(out) == expected_shape);
  BOOST_TEST(out.dtype() == in.dtype());
  bool same = out.nbytes() == in.nbytes();
  for (std::size_t b = 0; same && b < batch; ++b)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        same = same && std::memcmp(in.bytes().data() + ((b * rows + r) * cols + c) * size,
                                   out.bytes().data() + ((b * cols + c) * rows + r) * size, size) == 0;
  BOOST_TEST(same);
}

BOOST_AUTO_TEST_CASE(swaps_the_last_two_axes_for_every_element_size) {
  for (const ckpt::dtype type : {ckpt::dtype::u8, ckpt::dtype::bf16, ckpt::dtype::f32, ckpt::dtype::f64,
                                 ckpt::dtype::c64, ckpt::dtype::f8_e4m3, ckpt::dtype::boolean}) {
    for (const ckpt::dims& shape : {ckpt::dims{3, 5}, ckpt::dims{2, 17, 9}, ckpt::dims{2, 1, 3, 4}, ckpt::dims{0, 4}}) {
      BOOST_TEST_CONTEXT(type << " " << ckpt::to_string(shape)) {
        const ckpt::checkpoint t({{"w", numbered(type, shape)}, {"other", floats({1})}}, some_metadata);
        const ckpt::checkpoint r = ckpt::transpose(t, "w");
        check_transposed(t.get("w"), r.get("w"));
        BOOST_TEST(r.get("other").bytes().data() == t.get("other").bytes().data());
        BOOST_TEST(r.metadata() == some_metadata);
        BOOST_TEST(shape_of(t.get("w")) == shape);  // the input is untouched
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(twice_is_the_identity) {
  const ckpt::checkpoint t({{"w", numbered(ckpt::dtype::f16, {33, 70})}});
  BOOST_TEST((ckpt::transpose(ckpt::transpose(t, "w"), "w").get("w") == t.get("w")));
}

BOOST_AUTO_TEST_CASE(misuse_names_the_entry) {
  const ckpt::checkpoint t({{"b", floats({1, 2})},
                            {"packed", ckpt::tensor::copy_of(ckpt::dtype::f4, {2, 2}, std::vector<std::byte>(2))}});
  BOOST_TEST(message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::transpose(t, "w")); }) ==
             "ckpt: transpose: no entry named 'w'");
  BOOST_TEST(message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::transpose(t, "b")); }) ==
             "ckpt: transpose: entry 'b' has shape [2], not the 2 or more axes a transpose of the last two needs");
  BOOST_TEST(message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::transpose(t, "packed")); }) ==
             "ckpt: transpose: entry 'packed' has dtype F4, whose packed elements are not byte-addressable");
}

// torch.nn.Linear(in_features=2, out_features=3) stores its weight as [out, in] and computes
// y = x W^T; an Eigen model computing y = x W keeps W as an [in, out] matrix.
struct linear {
  Eigen::MatrixXf w;
  Eigen::RowVectorXf b;
};

BOOST_AUTO_TEST_CASE(a_pytorch_linear_weight_becomes_the_eigen_matrix) {
  const float torch_weight[3][2] = {{1, 2}, {3, 4}, {5, 6}};  // [out = 3, in = 2], C order
  const ckpt::checkpoint from_torch(
      {{"fc.weight", ckpt::tensor::copy_of(ckpt::dtype::f32, {3, 2}, std::as_bytes(std::span(&torch_weight[0][0], 6)))},
       {"fc.bias", floats({0.5f, -0.5f, 1.5f})}});
  const ckpt::checkpoint adapted = ckpt::transpose(
      ckpt::rename(from_torch, [](std::string_view n) { return n == "fc.weight" ? std::string("fc.w") : std::string("fc.b"); }),
      "fc.w");

  const linear like{Eigen::MatrixXf::Zero(2, 3), Eigen::RowVectorXf::Zero(3)};
  const linear fc = ckpt::to_params(adapted, like, ckpt::extract_options{.prefix = "fc"});
  for (int in = 0; in < 2; ++in)
    for (int out = 0; out < 3; ++out) BOOST_TEST(fc.w(in, out) == torch_weight[out][in]);
  // The layer computes what PyTorch's does: y = x W^T + b.
  const Eigen::RowVector2f x(10.0f, 100.0f);
  const Eigen::RowVectorXf y = x * fc.w + fc.b;
  for (int out = 0; out < 3; ++out)
    BOOST_TEST(y(out) == 10.0f * torch_weight[out][0] + 100.0f * torch_weight[out][1] + fc.b(out));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(split_entry)

BOOST_AUTO_TEST_CASE(along_axis_0_the_parts_are_views_of_the_source) {
  const ckpt::checkpoint t({{"attn.qkv", iota({6, 2})}, {"attn.out", floats({1})}}, some_metadata);
  const ckpt::checkpoint r = ckpt::split(t, "attn.qkv", {"attn.q", "attn.k", "attn.v"});
  BOOST_TEST(r.names() == (std::vector<std::string>{"attn.k", "attn.out", "attn.q", "attn.v"}));
  const std::byte* source = t.get("attn.qkv").bytes().data();
  const char* parts[] = {"attn.q", "attn.k", "attn.v"};
  for (std::size_t i = 0; i < 3; ++i) {
    const ckpt::tensor& part = r.get(parts[i]);
    BOOST_TEST(shape_of(part) == (ckpt::dims{2, 2}));
    BOOST_TEST(part.bytes().data() == source + i * 16);  // zero-copy
    for (std::size_t k = 0; k < 4; ++k) BOOST_TEST(part.as<float>()[k] == static_cast<float>(i * 4 + k));
  }
  BOOST_TEST(r.metadata() == some_metadata);
  BOOST_TEST(t.contains("attn.qkv"));  // the input is untouched
}

BOOST_AUTO_TEST_CASE(views_outlive_the_source_checkpoint_and_its_file) {
  const ckpt_test::temp_dir dir;
  ckpt::save(dir.path() / "fused.safetensors", ckpt::checkpoint({{"qkv", iota({4, 3})}}));
  ckpt::checkpoint parts;
  {
    const ckpt::checkpoint loaded = ckpt::load(dir.path() / "fused.safetensors");
    parts = ckpt::split(loaded, "qkv", {"a", "b"}, 0);
  }
  std::filesystem::remove(dir.path() / "fused.safetensors");
  BOOST_TEST(parts.get("b").as<float>()[5] == 11.0f);  // the mapping is still alive
  // Still views of the mapping, so that extraction can read them ahead and release their pages.
  BOOST_TEST(ckpt::detail::tensor_access::file_of(parts.get("a")) != nullptr);
  BOOST_TEST(ckpt::detail::tensor_access::file_of(parts.get("b")) != nullptr);
}

BOOST_AUTO_TEST_CASE(along_an_inner_axis_the_parts_are_copies) {
  const ckpt::checkpoint t({{"w", iota({2, 6, 2})}});
  for (const std::int64_t axis : {1, -2}) {
    const ckpt::checkpoint r = ckpt::split(t, "w", {"w.0", "w.1", "w.2"}, axis);
    BOOST_TEST(!r.contains("w"));
    for (std::size_t i = 0; i < 3; ++i) {
      const ckpt::tensor& part = r.get("w." + std::to_string(i));
      BOOST_TEST(shape_of(part) == (ckpt::dims{2, 2, 2}));
      // Element (o, j, k) of part i is element (o, 2 i + j, k) of the source, 12 o + 4 i + 2 j + k.
      for (std::size_t o = 0; o < 2; ++o)
        for (std::size_t j = 0; j < 2; ++j)
          for (std::size_t k = 0; k < 2; ++k)
            BOOST_TEST(part.as<float>()[o * 4 + j * 2 + k] == static_cast<float>(12 * o + 4 * i + 2 * j + k));
    }
  }
  // The last axis: columns.
  const ckpt::checkpoint cols = ckpt::split(ckpt::checkpoint({{"m", iota({2, 4})}}), "m", {"l", "r"}, -1);
  const std::vector<float> left(cols.get("l").as<float>().begin(), cols.get("l").as<float>().end());
  BOOST_TEST(left == (std::vector<float>{0, 1, 4, 5}));
}

BOOST_AUTO_TEST_CASE(the_part_may_reuse_the_source_name) {
  const ckpt::checkpoint r = ckpt::split(ckpt::checkpoint({{"w", iota({4})}}), "w", {"w", "w2"});
  BOOST_TEST(shape_of(r.get("w")) == ckpt::dims{2});
  BOOST_TEST(r.get("w2").as<float>()[0] == 2.0f);
}

BOOST_AUTO_TEST_CASE(misuse_names_the_entry_shape_axis_and_parts) {
  const ckpt::checkpoint t({{"qkv", iota({6, 4})}, {"k", floats({1})}, {"s", ckpt::tensor::copy_of(ckpt::dtype::f32, {}, std::vector<std::byte>(4))},
                            {"packed", ckpt::tensor::copy_of(ckpt::dtype::f4, {2, 4}, std::vector<std::byte>(4))}});
  const auto message = [&](std::string_view name, const std::vector<std::string>& into, std::int64_t axis) {
    return message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::split(t, name, into, axis)); });
  };
  BOOST_TEST(message("w", {"a"}, 0) == "ckpt: split: no entry named 'w'");
  BOOST_TEST(message("qkv", {}, 0) == "ckpt: split: entry 'qkv' of shape [6, 4]: no names to split it into");
  BOOST_TEST(message("qkv", {"q", "v", "v"}, 0) ==
             "ckpt: split: entry 'qkv' of shape [6, 4]: the part name 'v' appears twice");
  BOOST_TEST(message("qkv", {"q", "k", "v"}, 0) ==
             "ckpt: split: entry 'qkv' of shape [6, 4]: the part name 'k' is already an entry");
  BOOST_TEST(message("qkv", {"q", ""}, 0) == "ckpt: split: entry 'qkv' of shape [6, 4]: a part name is empty");
  BOOST_TEST(message("qkv", {"q", "__metadata__"}, 0) ==
             "ckpt: split: entry 'qkv' of shape [6, 4]: the part name '__metadata__' is reserved by the format");
  BOOST_TEST(message("qkv", {"a", "b", "c"}, 1) ==
             "ckpt: split: entry 'qkv' of shape [6, 4]: the extent 4 of axis 1 does not divide into 3 equal parts");
  BOOST_TEST(message("qkv", {"a", "b"}, 2) ==
             "ckpt: split: entry 'qkv' of shape [6, 4]: axis 2 is out of range for 2 axes");
  BOOST_TEST(message("qkv", {"a", "b"}, -3) ==
             "ckpt: split: entry 'qkv' of shape [6, 4]: axis -3 is out of range for 2 axes");
  BOOST_TEST(message("s", {"a"}, 0) == "ckpt: split: entry 's' of shape []: a scalar has no axis to split along");
  BOOST_TEST(message("packed", {"a", "b"}, 1) ==
             "ckpt: split: entry 'packed' of shape [2, 4]: its dtype F4 is packed, so it splits along axis 0 only, "
             "not axis 1");
  const ckpt::checkpoint odd({{"packed", ckpt::tensor::copy_of(ckpt::dtype::f4, {2, 1}, std::vector<std::byte>(1))}});
  BOOST_TEST(message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::split(odd, "packed", {"a", "b"})); }) ==
             "ckpt: split: entry 'packed' of shape [2, 1]: parts of shape [1, 1] of F4 are not whole bytes");
  // A packed entry whose parts are whole bytes splits along axis 0.
  const ckpt::checkpoint halves = ckpt::split(t, "packed", {"a", "b"});
  BOOST_TEST(halves.get("b").bytes().data() == t.get("packed").bytes().data() + 2);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cast_entries)

BOOST_AUTO_TEST_CASE(converts_floating_entries_only_by_default) {
  const ckpt::tensor w = ckpt::tensor::copy_of(ckpt::dtype::bf16, {2}, std::vector<std::byte>{
      std::byte{0x80}, std::byte{0x3f}, std::byte{0x40}, std::byte{0xc0}});  // 1, -3
  const ckpt::tensor packed = ckpt::tensor::copy_of(ckpt::dtype::f4, {2}, std::vector<std::byte>{std::byte{0x21}});
  const ckpt::tensor step = ckpt::tensor::copy_of(ckpt::dtype::i32, {1}, std::vector<std::byte>(4));
  const ckpt::tensor already = floats({0.25f});
  const ckpt::checkpoint t({{"w", w}, {"packed", packed}, {"step", step}, {"already", already}}, some_metadata);
  const ckpt::checkpoint r = ckpt::cast(t, ckpt::dtype::f32);
  BOOST_TEST(r.get("w").dtype() == ckpt::dtype::f32);
  const std::vector<float> values(r.get("w").as<float>().begin(), r.get("w").as<float>().end());
  BOOST_TEST(values == (std::vector<float>{1.0f, -3.0f}));
  BOOST_TEST((r.get("w") == ckpt::cast(w, ckpt::dtype::f32)));
  // Integers, packed formats and entries already of the dtype are shared as they are.
  BOOST_TEST(r.get("step").bytes().data() == step.bytes().data());
  BOOST_TEST(r.get("packed").bytes().data() == packed.bytes().data());
  BOOST_TEST(r.get("already").bytes().data() == already.bytes().data());
  BOOST_TEST(r.metadata() == some_metadata);
  BOOST_TEST(t.get("w").dtype() == ckpt::dtype::bf16);  // the input is untouched
}

BOOST_AUTO_TEST_CASE(a_filter_selects_by_name) {
  const ckpt::checkpoint t({{"model.w", floats({1.5f, 2.0f})}, {"optim.mu.w", floats({0.5f, 0.25f})}});
  const ckpt::checkpoint r =
      ckpt::cast(t, ckpt::dtype::f16, [](std::string_view n) { return n.starts_with("model."); });
  BOOST_TEST(r.get("model.w").dtype() == ckpt::dtype::f16);
  BOOST_TEST((r.get("model.w") == ckpt::cast(t.get("model.w"), ckpt::dtype::f16)));
  BOOST_TEST(r.get("optim.mu.w").dtype() == ckpt::dtype::f32);
}

BOOST_AUTO_TEST_CASE(an_impossible_conversion_names_the_entry_and_both_dtypes) {
  const ckpt::checkpoint packed({{"q", ckpt::tensor::copy_of(ckpt::dtype::f4, {2}, std::vector<std::byte>(1))}});
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               static_cast<void>(ckpt::cast(packed, ckpt::dtype::f32, [](std::string_view) { return true; }));
             }) == "ckpt: cast: entry 'q' cannot be cast from F4 to F32: F6_E2M3, F6_E3M2 and F4 are raw bytes only");
  const ckpt::checkpoint t({{"w", floats({1})}});
  BOOST_TEST(message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::cast(t, ckpt::dtype::f6_e2m3)); }) ==
             "ckpt: cast: entry 'w' cannot be cast from F32 to F6_E2M3: F6_E2M3, F6_E3M2 and F4 are raw bytes only");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(name_patterns)

BOOST_AUTO_TEST_CASE(matches_anywhere_and_replaces_every_match_with_groups) {
  const ckpt::name_pattern layer(R"(^model\.layers\.(\d+)\.)");
  BOOST_TEST(layer.pattern() == R"(^model\.layers\.(\d+)\.)");
  BOOST_TEST(layer.matches("model.layers.3.mlp.w"));
  BOOST_TEST(!layer.matches("x.model.layers.3.mlp.w"));
  BOOST_TEST(ckpt::name_pattern("mlp").matches("model.layers.3.mlp.w"));  // a match anywhere
  BOOST_TEST(layer.replace("model.layers.3.mlp.w", "blocks.$1.") == "blocks.3.mlp.w");
  BOOST_TEST(layer.replace("lm_head.w", "blocks.$1.") == "lm_head.w");  // no match: unchanged
  // Every match; $& and $0 the whole match, $$ a dollar, a backslash and other $ literal.
  const ckpt::name_pattern dot(R"(\.)");
  BOOST_TEST(dot.replace("a.b.c", "/") == "a/b/c");
  BOOST_TEST(dot.replace("a.b", "[$&$0]") == "a[..]b");
  BOOST_TEST(dot.replace("a.b", "$$\\$x") == "a$\\$xb");
  BOOST_TEST(ckpt::name_pattern("x*").replace("ab", "-") == "-a-b-");  // empty matches too
  BOOST_TEST(ckpt::name_pattern("(a)(b)").replace("ab", "$2$1$12") == "baa2");  // one digit a group
  // Copies share the compiled expression.
  const ckpt::name_pattern copy = layer;
  BOOST_TEST(copy.replace("model.layers.10.b", "$1") == "10b");
}

BOOST_AUTO_TEST_CASE(a_bad_pattern_or_replacement_is_refused_naming_it) {
  BOOST_TEST(message_of<std::invalid_argument>([] { return ckpt::name_pattern("(l1"); })
                 .starts_with("ckpt: the regular expression '(l1' is invalid: missing )"));
  // Backreferences are not RE2's.
  BOOST_TEST(message_of<std::invalid_argument>([] { return ckpt::name_pattern(R"((a)\1)"); })
                 .starts_with(R"(ckpt: the regular expression '(a)\1' is invalid: )"));
  const ckpt::name_pattern one("^(l1)");
  BOOST_TEST(message_of<std::invalid_argument>([&] { return one.replace("x", "$2"); })
                 .starts_with("ckpt: the replacement '$2' does not fit the regular expression '^(l1)': "));
}

BOOST_AUTO_TEST_CASE(names_of_100000_characters_are_matched_without_recursion) {
  // std::regex overflowed the stack on 40,000 characters (issue 25, class 1).
  const std::string tail(100'000, 'a');
  const ckpt::name_pattern p(R"(^model\.(.*)$)");
  BOOST_TEST(p.matches("model." + tail));
  BOOST_TEST(p.replace("model." + tail, "$1.w") == tail + ".w");
  BOOST_TEST(ckpt::name_pattern("(a|b)*c").matches(tail + "c"));
  BOOST_TEST(!ckpt::name_pattern("(a|aa)*c").matches(tail));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(by_pattern)

BOOST_AUTO_TEST_CASE(select_drop_and_rename_share_the_tensors) {
  const ckpt::checkpoint t({{"transformer.h.0.attn.bias", floats({1})},
                            {"transformer.h.0.attn.c_attn.weight", floats({2})},
                            {"transformer.h.1.attn.bias", floats({3})},
                            {"lm_head.weight", floats({4})}},
                           some_metadata);
  const ckpt::name_pattern masks(R"(\.attn\.bias$)");
  const ckpt::checkpoint kept = ckpt::select(t, masks);
  BOOST_TEST(kept.names() == (std::vector<std::string>{"transformer.h.0.attn.bias", "transformer.h.1.attn.bias"}));
  const ckpt::checkpoint dropped = ckpt::drop(t, masks);
  BOOST_TEST(dropped.names() == (std::vector<std::string>{"lm_head.weight", "transformer.h.0.attn.c_attn.weight"}));
  BOOST_TEST((dropped.metadata() == some_metadata));
  BOOST_TEST(dropped.get("lm_head.weight").bytes().data() == t.get("lm_head.weight").bytes().data());

  const ckpt::checkpoint r = ckpt::rename(dropped, ckpt::name_pattern(R"(^transformer\.h\.(\d+)\.)"), "blocks.$1.");
  BOOST_TEST(r.names() == (std::vector<std::string>{"blocks.0.attn.c_attn.weight", "lm_head.weight"}));
  BOOST_TEST(r.get("blocks.0.attn.c_attn.weight").bytes().data() ==
             t.get("transformer.h.0.attn.c_attn.weight").bytes().data());
  // A group the pattern lacks is refused before any entry; a clash as the other rename.
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               static_cast<void>(ckpt::rename(t, ckpt::name_pattern("^(x)"), "$2"));
             }).starts_with("ckpt: the replacement '$2' does not fit the regular expression '^(x)'"));
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               static_cast<void>(ckpt::rename(t, ckpt::name_pattern(R"(\.\d+\.)"), "."));
             }) == "ckpt: rename: entries 'transformer.h.0.attn.bias' and 'transformer.h.1.attn.bias' are both "
                   "renamed to 'transformer.h.attn.bias'");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fuse_entries)

BOOST_AUTO_TEST_CASE(inverts_split_along_every_axis) {
  for (const ckpt::dtype type : {ckpt::dtype::f32, ckpt::dtype::bf16, ckpt::dtype::i8, ckpt::dtype::f64}) {
    const ckpt::checkpoint t({{"qkv", numbered(type, {2, 6, 3})}, {"other", floats({1})}}, some_metadata);
    for (const std::int64_t axis : {0, 1, -1, 2}) {
      const std::int64_t extent = axis == 1 ? 6 : (axis == 0 ? 2 : 3);
      const std::vector<std::string> parts =
          extent % 3 == 0 ? std::vector<std::string>{"q", "k", "v"} : std::vector<std::string>{"q", "k"};
      const ckpt::checkpoint s = ckpt::split(t, "qkv", parts, axis);
      const ckpt::checkpoint back = ckpt::fuse(s, parts, "qkv", axis);
      BOOST_TEST(back.names() == t.names());
      BOOST_TEST((back.get("qkv") == t.get("qkv")));
      BOOST_TEST((back.metadata() == some_metadata));
      BOOST_TEST(back.get("other").bytes().data() == t.get("other").bytes().data());  // shared
    }
  }
  // Parts of different extents along the axis; into may be a part's name.
  const ckpt::checkpoint t({{"a", iota({2, 1})}, {"b", iota({2, 3})}});
  const ckpt::checkpoint joined = ckpt::fuse(t, {"b", "a"}, "a", 1);
  BOOST_TEST(joined.names() == (std::vector<std::string>{"a"}));
  BOOST_TEST(shape_of(joined.get("a")) == (ckpt::dims{2, 4}));
  std::vector<float> values(8);
  std::memcpy(values.data(), joined.get("a").bytes().data(), 32);
  BOOST_TEST(values == (std::vector<float>{0, 1, 2, 0, 3, 4, 5, 1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(errors_name_the_entries_and_shapes_that_disagree) {
  const ckpt::checkpoint t({{"q", iota({2, 3})}, {"k", iota({2, 4})}, {"s", numbered(ckpt::dtype::f32, {})},
                            {"h", numbered(ckpt::dtype::f16, {2, 3})}, {"r", iota({2, 3, 1})}});
  const auto message = [&](const std::vector<std::string>& parts, std::string_view into, std::int64_t axis) {
    return message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::fuse(t, parts, into, axis)); });
  };
  BOOST_TEST(message({"q", "k"}, "qk", 0) ==
             "ckpt: fuse: into 'qk' along axis 0: the shapes disagree off that axis: 'q' [2, 3] and 'k' [2, 4]");
  BOOST_TEST(message({"q", "h"}, "qh", 0) == "ckpt: fuse: into 'qh': the dtypes differ: 'q' F32 and 'h' F16");
  BOOST_TEST(message({"q", "r"}, "qr", 0) ==
             "ckpt: fuse: into 'qr' along axis 0: the shapes disagree off that axis: 'q' [2, 3] and 'r' [2, 3, 1]");
  BOOST_TEST(message({"q", "x"}, "qx", 0) == "ckpt: fuse: no entry named 'x'");
  BOOST_TEST(message({"q", "q"}, "qq", 0) == "ckpt: fuse: into 'qq': the entry 'q' is named twice");
  BOOST_TEST(message({}, "none", 0) == "ckpt: fuse: into 'none': no entries to fuse");
  BOOST_TEST(message({"q", "k"}, "h", 1) == "ckpt: fuse: into 'h': 'h' is already an entry, and not one of the parts");
  BOOST_TEST(message({"q", "k"}, "__metadata__", 1) ==
             "ckpt: fuse: into '__metadata__': the name '__metadata__' is reserved by the format");
  BOOST_TEST(message({"q", "k"}, "qk", 2) ==
             "ckpt: fuse: into 'qk': axis 2 is out of range for the 2 axes of 'q' [2, 3]");
  BOOST_TEST(message({"s"}, "ss", 0) == "ckpt: fuse: into 'ss': the entry 's' is a scalar, which has no axis");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_adapt

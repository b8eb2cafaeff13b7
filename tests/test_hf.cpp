// Hugging Face layouts (tests/fixtures/hf/, written by make_fixtures.py with PyTorch 1.13): every
// layout save_pretrained and torch.save produce loads through ckpt::load with the expected names
// and values; and what save and save_sharded write satisfies transformers' loading rules (the
// guide's "Foreign checkpoints").
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/adapt.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/sharded.hpp>
#include <ckpt/torch.hpp>

#include <boost/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_hf)

namespace fs = std::filesystem;

namespace {

using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

const fs::path fixtures = fs::path(CKPT_FIXTURES_DIR) / "hf";

// make_fixtures.py's NAMES (sorted) and SHAPES: the k-th holds ((j + 3 k) % 64 - 32) / 8 at j.
const std::map<std::string, ckpt::dims> shapes{
    {"lm_head.weight", {8, 4}},
    {"transformer.h.0.attn.c_attn.bias", {12}},
    {"transformer.h.0.attn.c_attn.weight", {4, 12}},
    {"transformer.h.0.attn.c_proj.bias", {4}},
    {"transformer.h.0.attn.c_proj.weight", {4, 4}},
    {"transformer.h.0.ln_1.bias", {4}},
    {"transformer.h.0.ln_1.weight", {4}},
    {"transformer.h.0.ln_2.bias", {4}},
    {"transformer.h.0.ln_2.weight", {4}},
    {"transformer.h.0.mlp.c_fc.bias", {16}},
    {"transformer.h.0.mlp.c_fc.weight", {4, 16}},
    {"transformer.h.0.mlp.c_proj.bias", {4}},
    {"transformer.h.0.mlp.c_proj.weight", {16, 4}},
    {"transformer.ln_f.bias", {4}},
    {"transformer.ln_f.weight", {4}},
    {"transformer.wpe.weight", {4, 4}},
    {"transformer.wte.weight", {8, 4}},
};

std::vector<float> expected_values(const std::string& name) {
  // lm_head.weight is tied to wte: its values are wte's.
  const std::string source = name == "lm_head.weight" ? "transformer.wte.weight" : name;
  const auto k = static_cast<int>(std::distance(shapes.begin(), shapes.find(source)));
  std::vector<float> out(static_cast<std::size_t>(ckpt::detail::numel_of(shapes.at(source))));
  for (std::size_t j = 0; j < out.size(); ++j)
    out[j] = static_cast<float>((static_cast<int>(j) + 3 * k) % 64 - 32) / 8.0f;
  return out;
}

std::vector<float> values_of(const ckpt::tensor& x) {
  const ckpt::tensor f = ckpt::cast(x, ckpt::dtype::f32);
  std::vector<float> out(f.nbytes() / sizeof(float));
  std::memcpy(out.data(), f.bytes().data(), f.nbytes());
  return out;
}

// `t` holds exactly the fixture's entries (with lm_head.weight if `tied`), of `type`, with the
// script's values.
void check_layout(const ckpt::checkpoint& t, ckpt::dtype type, bool tied) {
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes)
    if (tied || name != "lm_head.weight") names.push_back(name);
  BOOST_TEST(t.names() == names, boost::test_tools::per_element());
  for (const std::string& name : names) {
    const ckpt::tensor& x = t.get(name);
    BOOST_TEST(x.dtype() == type, name);
    BOOST_TEST(ckpt::dims(x.shape().begin(), x.shape().end()) == shapes.at(name), name);
    BOOST_TEST(values_of(x) == expected_values(name), boost::test_tools::per_element());
  }
}

boost::json::object header_of(const fs::path& file) {
  const std::string bytes = read_bytes(file);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return boost::json::parse(bytes.substr(8, n)).as_object();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(every_layout_loads)

BOOST_AUTO_TEST_CASE(a_single_safetensors_file_loads_alone_or_through_its_folder) {
  check_layout(ckpt::load(fixtures / "single_safetensors" / "model.safetensors"), ckpt::dtype::f32, false);
  const ckpt::checkpoint t = ckpt::load(fixtures / "single_safetensors");
  check_layout(t, ckpt::dtype::f32, false);
  BOOST_TEST((t.metadata() == ckpt::metadata_map{{"format", "pt"}}));
}

BOOST_AUTO_TEST_CASE(a_sharded_safetensors_checkpoint_loads_through_its_index_or_its_folder) {
  check_layout(ckpt::load(fixtures / "sharded_safetensors"), ckpt::dtype::f32, false);
  check_layout(ckpt::load(fixtures / "sharded_safetensors" / "model.safetensors.index.json"), ckpt::dtype::f32, false);
}

BOOST_AUTO_TEST_CASE(a_single_bin_file_or_its_folder_loads_with_its_tied_head_kept_or_not) {
  for (const fs::path& p : {fixtures / "single_bin" / "pytorch_model.bin", fixtures / "single_bin"}) {
    const ckpt::checkpoint t = ckpt::load(p);
    check_layout(t, ckpt::dtype::f32, true);
    // One tensor under two names: the same bytes.
    BOOST_TEST(t.get("lm_head.weight").bytes().data() == t.get("transformer.wte.weight").bytes().data());
  }
  // The .pt options reach load: keep_tied = false keeps the first name only, as save_pretrained.
  std::vector<std::vector<std::string>> groups;
  const ckpt::checkpoint untied = ckpt::load(
      fixtures / "single_bin", {},
      ckpt::torch_options{.keep_tied = false, .tied = [&](const std::vector<std::string>& g) { groups.push_back(g); }});
  BOOST_TEST(!untied.contains("transformer.wte.weight"));
  BOOST_TEST(untied.contains("lm_head.weight"));
  BOOST_TEST(groups == (std::vector<std::vector<std::string>>{{"lm_head.weight", "transformer.wte.weight"}}));
}

BOOST_AUTO_TEST_CASE(a_sharded_bin_checkpoint_loads_through_its_index_or_its_folder) {
  check_layout(ckpt::load(fixtures / "sharded_bin"), ckpt::dtype::f32, false);
  check_layout(ckpt::load(fixtures / "sharded_bin" / "pytorch_model.bin.index.json"), ckpt::dtype::f32, false);
}

BOOST_AUTO_TEST_CASE(fp16_and_bf16_cast_to_float_exactly) {
  check_layout(ckpt::load(fixtures / "fp16_safetensors"), ckpt::dtype::f16, false);
  check_layout(ckpt::load(fixtures / "bf16_bin"), ckpt::dtype::bf16, true);
}

BOOST_AUTO_TEST_CASE(files_are_recognized_by_content_not_by_name) {
  const temp_dir d;
  fs::copy_file(fixtures / "single_bin" / "pytorch_model.bin", d.path() / "weights.safetensors");
  fs::copy_file(fixtures / "single_safetensors" / "model.safetensors", d.path() / "weights.bin");
  check_layout(ckpt::load(d.path() / "weights.safetensors"), ckpt::dtype::f32, true);
  check_layout(ckpt::load(d.path() / "weights.bin"), ckpt::dtype::f32, false);
}

BOOST_AUTO_TEST_CASE(a_folder_with_two_checkpoints_is_refused_naming_both) {
  const temp_dir d;
  fs::copy_file(fixtures / "single_safetensors" / "model.safetensors", d.path() / "model.safetensors");
  fs::copy_file(fixtures / "single_bin" / "pytorch_model.bin", d.path() / "pytorch_model.bin");
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(ckpt::load(d.path())); }) ==
             "ckpt: the folder '" + d.path().string() +
                 "' holds a safetensors checkpoint ('model.safetensors') and a torch.save one ('pytorch_model.bin'); "
                 "load the file you mean");
  // Each still loads by its file.
  check_layout(ckpt::load(d.path() / "pytorch_model.bin"), ckpt::dtype::f32, true);
  fs::remove(d.path() / "pytorch_model.bin");
  fs::copy_file(fixtures / "sharded_safetensors" / "model.safetensors.index.json",
                d.path() / "model.safetensors.index.json");
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(ckpt::load(d.path())); }) ==
             "ckpt: the folder '" + d.path().string() +
                 "' holds a single-file checkpoint ('model.safetensors') and a sharded one "
                 "('model.safetensors.index.json'); load the file you mean");
  fs::remove(d.path() / "model.safetensors");
  fs::copy_file(fixtures / "sharded_bin" / "pytorch_model.bin.index.json", d.path() / "pytorch_model.bin.index.json");
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(ckpt::load(d.path())); }) ==
             "ckpt: the folder '" + d.path().string() +
                 "' holds a safetensors checkpoint ('model.safetensors.index.json') and a torch.save one "
                 "('pytorch_model.bin.index.json'); load the file you mean");
}

BOOST_AUTO_TEST_CASE(a_missing_bin_shard_is_an_io_error_naming_it) {
  const temp_dir d;
  fs::copy_file(fixtures / "sharded_bin" / "pytorch_model.bin.index.json", d.path() / "pytorch_model.bin.index.json");
  fs::copy_file(fixtures / "sharded_bin" / "pytorch_model-00001-of-00003.bin", d.path() / "pytorch_model-00001-of-00003.bin");
  BOOST_TEST(message_of<ckpt::io_error>([&] { static_cast<void>(ckpt::load(d.path())); })
                 .find("pytorch_model-00002-of-00003.bin") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(what_ckpt_writes_follows_the_loading_rules)

BOOST_AUTO_TEST_CASE(save_writes_format_pt) {
  const temp_dir d;
  const ckpt::checkpoint t = ckpt::load(fixtures / "single_bin", {}, ckpt::torch_options{.keep_tied = false});
  ckpt::save(d.path() / "model.safetensors", t.with_metadata({}));
  const boost::json::object header = header_of(d.path() / "model.safetensors");
  BOOST_TEST(header.at("__metadata__").at("format").as_string() == "pt");
  // The folder then loads as transformers' single-file layout.
  BOOST_TEST(ckpt::load(d.path()).names() == t.names());
}

BOOST_AUTO_TEST_CASE(save_sharded_writes_the_index_and_shards_transformers_reads) {
  const temp_dir d;
  const ckpt::checkpoint t = ckpt::load(fixtures / "sharded_safetensors");
  const ckpt::sharded_files files = ckpt::save_sharded(d.path(), t, 600);
  BOOST_TEST(files.index == d.path() / "model.safetensors.index.json");
  // The same shards as huggingface_hub's split (make_fixtures.py), and an index byte for byte
  // as transformers writes it, but for the save id in its metadata.
  BOOST_TEST(ckpt_test::without_save_id(read_bytes(files.index)) ==
             read_bytes(fixtures / "sharded_safetensors" / "model.safetensors.index.json"));
  const boost::json::object index = boost::json::parse(read_bytes(files.index)).as_object();
  std::uint64_t total = 0;
  for (const auto& e : t) total += e.second.nbytes();
  BOOST_TEST(index.at("metadata").at("total_size").to_number<std::uint64_t>() == total);
  const boost::json::object& weight_map = index.at("weight_map").as_object();
  BOOST_TEST(weight_map.size() == t.size());
  for (std::size_t k = 0; k < files.shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, files.shards.size());
    BOOST_TEST(files.shards[k] == d.path() / name);
    const boost::json::object header = header_of(files.shards[k]);
    BOOST_TEST(header.at("__metadata__").at("format").as_string() == "pt");
    for (const auto& [entry, shard] : weight_map)
      if (shard.as_string() == name) BOOST_TEST(header.contains(entry), entry);
  }
  for (const auto& [entry, shard] : weight_map) {
    BOOST_TEST(t.contains(std::string(entry)));
    BOOST_TEST(fs::exists(d.path() / std::string(shard.as_string())));
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_hf

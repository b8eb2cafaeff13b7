// docs/guide.md, "Weights from PyTorch". The lines between two `// [name]` markers are the guide's
// code block `torch.cpp#name` (tests/test_docs.cpp checks that the guide shows them unchanged); the
// test cases below run them on the files of tests/fixtures/torch/, written by PyTorch 1.13.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <filesystem>
#include <string>
#include <vector>

namespace {

const std::filesystem::path fixtures = std::filesystem::path(CKPT_SOURCE_DIR) / "tests" / "fixtures" / "torch";

// [torch_struct]
// One torch.nn.Linear as its state_dict names it: weight [out, in], bias [out]. The weight's C
// order is what a row-major Eigen matrix holds, so it is read without a transpose.
struct linear {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> weight;
  Eigen::VectorXf bias;
};
// [torch_struct]

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_torch)

BOOST_AUTO_TEST_CASE(a_state_dict_reads_into_a_struct_without_a_transpose) {
  const std::filesystem::path path = fixtures / "mlp_f32.bin";
  // [torch_load]
  // torch.save(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).state_dict(), path)
  const ckpt::checkpoint t = ckpt::load(path);  // "0.weight", "0.bias", "2.weight", "2.bias"
  const linear first = ckpt::to_params(t, linear{Eigen::MatrixXf(3, 4), Eigen::VectorXf(3)}, {.prefix = "0"});
  // [torch_load]
  const auto w = t.get("0.weight").as<float>();
  BOOST_TEST(first.weight(0, 1) == w[1]);
  BOOST_TEST(first.weight(2, 3) == w[11]);
  BOOST_TEST(first.bias(2) == t.get("0.bias").as<float>()[2]);
}

BOOST_AUTO_TEST_CASE(an_optimizer_state_dict_loads_its_moments_as_entries_and_its_values_as_metadata) {
  const std::filesystem::path path = fixtures / "adam.pt";
  // [torch_optimizer]
  // torch.save(torch.optim.Adam(model.parameters(), lr=0.001).state_dict(), path)
  const ckpt::checkpoint adam = ckpt::load(path);
  const ckpt::tensor& m = adam.get("state.0.exp_avg");  // per parameter: exp_avg, exp_avg_sq, step
  const std::string lr = adam.metadata().at("param_groups.0.lr");  // "0.001": plain values as text
  // [torch_optimizer]
  BOOST_TEST(m.numel() == 6);
  BOOST_TEST(lr == "0.001");
}

BOOST_AUTO_TEST_CASE(tied_weights_are_reported_and_kept_under_both_names_or_the_first) {
  const std::filesystem::path path = fixtures / "tied.pt";
  // [torch_tied]
  // out.weight is embed.weight (one Parameter under two names, as a tied language-model head)
  std::vector<std::vector<std::string>> tied;
  // load's overload in ckpt/torch.hpp takes the options of the torch.save reader.
  const ckpt::checkpoint both = ckpt::load(path, {}, {.tied = [&](const std::vector<std::string>& names) {
    tied.push_back(names);  // {"embed.weight", "out.weight"}
  }});
  const ckpt::checkpoint first = ckpt::load(path, {}, {.keep_tied = false});  // "embed.weight" only
  // [torch_tied]
  BOOST_TEST(both.size() == 2u);
  BOOST_TEST(first.size() == 1u);
  BOOST_TEST(tied.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_pickled_call_is_refused) {
  const std::filesystem::path path = fixtures / "evil.pt";
  std::string message;
  // [torch_refused]
  try {
    (void)ckpt::load(path);  // its pickle calls os.system
  } catch (const ckpt::format_error& e) {
    // "ckpt: '.../evil.pt' is not a readable PyTorch file: evil/data.pkl: it refers to the global
    // 'posix.system', which is not one of the tensor-rebuilding functions and storage types a
    // torch.save state dict uses; nothing in the file was run"
    message = e.what();
  }
  // [torch_refused]
  BOOST_TEST(message.find("'posix.system'") != std::string::npos, message);
}

BOOST_AUTO_TEST_SUITE_END()

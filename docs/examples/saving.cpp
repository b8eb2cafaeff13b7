// docs/guide.md, "Saving and loading". The lines between two `// [name]` markers are the guide's
// code block `saving.cpp#name` (tests/test_docs.cpp checks that the guide shows them unchanged);
// the test cases below run them. test_docs runs in a fresh temporary folder, so the relative
// file names of the guide are files of that folder.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// [save_load]
struct linear {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

struct mlp {
  linear l1, l2;
};

void save_model(const mlp& model) {
  ckpt::save("model.safetensors", ckpt::of_params(model, "model"));  // model.l1.w, ...
}

mlp load_model(const mlp& like) {  // `like` gives the structure, shapes and dtypes
  return ckpt::to_params(ckpt::load("model.safetensors"), like, {.prefix = "model"});
}
// [save_load]

mlp make_mlp(int in, int hidden, int out) {
  return {{Eigen::MatrixXf::Random(hidden, in), Eigen::VectorXf::Random(hidden)},
          {Eigen::MatrixXf::Random(out, hidden), Eigen::VectorXf::Random(out)}};
}

// [read_params]
void restore_model(mlp& model) {  // fills the existing leaves: no second copy of the model
  ckpt::read_params(ckpt::load("model.safetensors"), model, {.prefix = "model"});
}
// [read_params]

std::string load_wrong_shape() {
  std::string message;
  // [errors]
  mlp wider = make_mlp(2, 16, 2);  // the file's hidden layer has 8 units
  try {
    ckpt::read_params(ckpt::load("model.safetensors"), wider, {.prefix = "model"});
  } catch (const std::invalid_argument& e) {
    // "ckpt: read_params: strict read: 3 entries of another shape: 'model.l1.b' [8] (the template's
    // [16]), 'model.l1.w' [8, 2] (the template's [16, 2]), 'model.l2.w' [2, 8] (the template's
    // [2, 16]) (copy_overlap = true copies the block both shapes share)"
    message = e.what();  // `wider` is unchanged: every entry is checked before any leaf is written
  }
  // [errors]
  return message;
}

// [cast]
struct half_linear {
  Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic> w;
  Eigen::Matrix<Eigen::half, Eigen::Dynamic, 1> b;
};

half_linear load_half(const half_linear& like) {
  // The file holds F32 entries: without .cast = true this throws "... has dtype F32 but the
  // template's leaf has dtype F16 (pass cast = true to convert)".
  return ckpt::to_params(ckpt::load("model.safetensors"), like, {.prefix = "model.l1", .cast = true});
}
// [cast]

// [save_sections]
void save_live(const mlp& model, const mlp& best, int step) {
  // Writes the same file as ckpt::save(path, ckpt::concat({...})), straight from the leaves.
  ckpt::save("live.safetensors",
                    {{model, "model"}, {best, "best"}, {ckpt::of_int("step", step)}},
                    {{"note", "written from live leaves"}});
}
// [save_sections]

// [describe]
std::string describe(const ckpt::checkpoint& t) {
  std::ostringstream out;
  for (const auto& [name, x] : t)  // in name order; x is a ckpt::tensor
    out << name << ' ' << x.dtype() << ' ' << ckpt::to_string(x.shape()) << '\n';
  if (const ckpt::tensor* w = t.find("model.l1.w"))  // or t.get(name), which throws if absent
    out << "l1.w[0] = " << w->as<float>()[0] << '\n';  // as<T>() checks T against the dtype
  return out.str();
}
// [describe]

float first_weight_of_file() {
  // [view]
  const ckpt::checkpoint t = ckpt::load("model.safetensors");
  // A read-only Eigen::Map onto the file's mapped bytes (row-major, as the file stores them).
  const auto w = ckpt::matrix_view<float>(t.get("model.l1.w"));
  // [view]
  return w(0, 0);
}

std::string file_bytes(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_saving)

BOOST_AUTO_TEST_CASE(save_then_load_gives_the_model_back) {
  const mlp model = make_mlp(2, 8, 2);
  save_model(model);
  const mlp back = load_model(make_mlp(2, 8, 2));
  BOOST_TEST((back.l1.w == model.l1.w));
  BOOST_TEST((back.l2.b == model.l2.b));
  BOOST_TEST(ckpt::load("model.safetensors").names() ==
             (std::vector<std::string>{"model.l1.b", "model.l1.w", "model.l2.b", "model.l2.w"}));

  mlp in_place = make_mlp(2, 8, 2);
  restore_model(in_place);
  BOOST_TEST((in_place.l1.w == model.l1.w));
  BOOST_TEST(first_weight_of_file() == model.l1.w(0, 0));
  std::ostringstream first;
  first << "l1.w[0] = " << model.l1.w(0, 0) << '\n';
  BOOST_TEST(describe(ckpt::load("model.safetensors")) ==
             "model.l1.b F32 [8]\nmodel.l1.w F32 [8, 2]\nmodel.l2.b F32 [2]\nmodel.l2.w F32 [2, 8]\n" + first.str());
}

BOOST_AUTO_TEST_CASE(a_mismatch_names_the_entry_and_changes_nothing) {
  save_model(make_mlp(2, 8, 2));
  BOOST_TEST(load_wrong_shape() ==
             "ckpt: read_params: strict read: 3 entries of another shape: 'model.l1.b' [8] (the template's [16]), "
             "'model.l1.w' [8, 2] (the template's [16, 2]), 'model.l2.w' [2, 8] (the template's [2, 16]) "
             "(copy_overlap = true copies the block both shapes share)");
  const half_linear like{Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic>(8, 2),
                         Eigen::Matrix<Eigen::half, Eigen::Dynamic, 1>(8)};
  BOOST_TEST(std::string([&] {
               try {
                 (void)ckpt::to_params(ckpt::load("model.safetensors"), like, {.prefix = "model.l1"});
               } catch (const std::invalid_argument& e) {
                 return std::string(e.what());
               }
               return std::string("no exception");
             }()) == "ckpt: to_params: entry 'model.l1.w' has dtype F32 but the template's leaf has dtype "
                     "F16 (pass cast = true to convert)");
  struct deeper {
    linear l1, l2, l3;
  };
  const mlp m = make_mlp(2, 8, 2);
  const deeper d{m.l1, m.l2, m.l2};
  BOOST_TEST(std::string([&] {
               try {
                 (void)ckpt::to_params(ckpt::load("model.safetensors"), d, {.prefix = "model"});
               } catch (const std::invalid_argument& e) {
                 return std::string(e.what());
               }
               return std::string("no exception");
             }()) == "ckpt: to_params: no entry named 'model.l3.w'");
  const half_linear h = load_half(like);
  const ckpt::checkpoint t = ckpt::load("model.safetensors");
  BOOST_TEST(static_cast<float>(h.w(3, 1)) ==
             static_cast<float>(Eigen::half(ckpt::matrix_view<float>(t.get("model.l1.w"))(3, 1))));
}

BOOST_AUTO_TEST_CASE(sections_are_written_as_the_checkpoint_would_be) {
  const mlp model = make_mlp(2, 8, 2), best = make_mlp(2, 8, 2);
  save_live(model, best, 42);
  ckpt::save("snapshot.safetensors", ckpt::concat({ckpt::of_params(model, "model"), ckpt::of_params(best, "best"),
                                                   ckpt::of_int("step", 42)})
                                         .with_metadata({{"note", "written from live leaves"}}));
  BOOST_TEST(file_bytes("live.safetensors").size() > 100u);
  BOOST_TEST((file_bytes("live.safetensors") == file_bytes("snapshot.safetensors")));
  BOOST_TEST(ckpt::to_int("step", ckpt::load("live.safetensors")) == 42);
}

BOOST_AUTO_TEST_SUITE_END()

// Checkpoints are immutable and may be read from several threads at once; a background save
// works on its own snapshot. CI runs this file, with the manager's tests, under ThreadSanitizer
// (scripts/ckpt-dev test, stage "clang++ TSan"), which reports any data race these tests reach.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <atomic>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_concurrency)

namespace {

namespace fs = std::filesystem;

using ckpt_test::temp_dir;

struct layer {
  Eigen::MatrixXf w;  // column-major: extraction transposes
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r;
  Eigen::VectorXd b;
};
struct model {
  std::vector<layer> layers;
  std::int32_t step;
};

model make_model(float seed) {
  model m{};
  m.layers.resize(3);
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const auto k = static_cast<float>(i) + seed;
    m.layers[i].w = Eigen::MatrixXf::NullaryExpr(37, 23, [k](Eigen::Index r, Eigen::Index c) {
      return k * 1000.0f + static_cast<float>(r * 23 + c);
    });
    m.layers[i].r = m.layers[i].w * 0.5f;
    m.layers[i].b = Eigen::VectorXd::LinSpaced(11, k, k + 1.0);
  }
  m.step = static_cast<std::int32_t>(seed);
  return m;
}

bool same(const model& a, const model& b) {
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    if (a.layers[i].w != b.layers[i].w || a.layers[i].r != b.layers[i].r || a.layers[i].b != b.layers[i].b)
      return false;
  }
  return a.step == b.step;
}

// Runs `work(thread index)` on `n` threads at once and returns how many iterations failed.
// Boost.Test's assertions are not thread-safe: the threads only count, the test asserts.
template <class F>
int failures_on_threads(int n, F work) {
  std::atomic<int> failed{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      // Start together, so that the threads really overlap.
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      try {
        failed.fetch_add(work(i));
      } catch (...) {
        failed.fetch_add(1000);
      }
    });
  }
  for (auto& t : threads) t.join();
  return failed.load();
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_loaded_checkpoint_is_read_by_several_threads_at_once) {
  const temp_dir s;
  const model expected = make_model(3);
  ckpt::save(s.path() / "m.safetensors", ckpt::of_params(expected, "model"));
  // One checkpoint, mapped from the file, shared by reference by every thread.
  const ckpt::checkpoint shared = ckpt::load(s.path() / "m.safetensors");
  const model like = make_model(0);

  const int failed = failures_on_threads(4, [&](int thread) {
    int bad = 0;
    for (int iteration = 0; iteration < 20; ++iteration) {
      bad += shared.names().size() != 10;
      bad += shared.find("model.layers.1.w") == nullptr;
      bad += ckpt::to_int("model.step", shared) != 3;
      bad += !same(ckpt::to_params(shared, like, {.prefix = "model"}), expected);
      model in_place = like;
      ckpt::read_params(shared, in_place, {.prefix = "model"});
      bad += !same(in_place, expected);
      const auto view = ckpt::matrix_view<float>(shared.get("model.layers.2.r"));
      bad += view != expected.layers[2].r;
      // Copies share the entries: counting references from many threads is the point.
      const ckpt::checkpoint copy = shared;
      const ckpt::checkpoint both =
          ckpt::concat({copy, ckpt::of_int("thread", thread)}).with_metadata({{"t", std::to_string(thread)}});
      bad += ckpt::to_int("thread", both) != thread;
      // Saving the shared checkpoint from several threads reads its mapped bytes concurrently.
      const fs::path mine = s.path() / ("copy-" + std::to_string(thread) + ".safetensors");
      ckpt::save(mine, both);
      bad += !same(ckpt::to_params(ckpt::load(mine), like, {.prefix = "model"}), expected);
    }
    return bad;
  });
  BOOST_TEST(failed == 0);
}

BOOST_AUTO_TEST_CASE(the_last_reference_may_be_dropped_on_another_thread) {
  const temp_dir s;
  ckpt::save(s.path() / "m.safetensors", ckpt::of_params(make_model(1)));
  std::vector<ckpt::tensor> kept;
  {
    const ckpt::checkpoint loaded = ckpt::load(s.path() / "m.safetensors");
    for (const auto& [name, x] : loaded) kept.push_back(x);
  }  // the checkpoint is gone; the tensors keep the mapping alive
  const int failed = failures_on_threads(static_cast<int>(kept.size()), [&](int i) {
    const ckpt::tensor mine = std::move(kept[static_cast<std::size_t>(i)]);
    const bool ok = mine.nbytes() > 0 && mine.bytes().size() == mine.nbytes();
    return ok ? 0 : 1;
  });  // the mapping is unmapped by whichever thread drops the last tensor
  BOOST_TEST(failed == 0);
}

BOOST_AUTO_TEST_CASE(a_background_save_is_independent_of_the_live_parameters) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path(), {.max_to_keep = 2});
  model live = make_model(0);
  std::vector<model> saved;
  for (int step = 1; step <= 4; ++step) {
    live = make_model(static_cast<float>(step));
    saved.push_back(live);
    BOOST_TEST(manager.save_async(step, {ckpt::of_params(live)}));
    // The trainer goes on changing its parameters while the write runs.
    for (auto& l : live.layers) l.w.array() += 1.0f;
  }
  manager.wait();
  const model like = make_model(0);
  BOOST_TEST(same(ckpt::to_params(manager.load(4), like), saved[3]));
  BOOST_TEST(same(ckpt::to_params(manager.load(3), like), saved[2]));
}

BOOST_AUTO_TEST_SUITE_END()  // test_concurrency

// Replays tests/corpus/ (CKPT_CORPUS_DIR) through the fuzz target's checks (tests/fuzz/exercise.hpp):
// the inputs that once crashed, hung or leaked, and a minimized set of interesting ones, so that
// every build of the suite (g++, clang + ASan/UBSan) re-runs what the libFuzzer campaign found.
#include <boost/test/unit_test.hpp>

#include "fuzz/exercise.hpp"
#include "support.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_corpus)

namespace {

std::vector<std::filesystem::path> corpus_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(CKPT_CORPUS_DIR))
    if (entry.is_regular_file() && entry.path().filename() != "README.md") files.push_back(entry.path());
  std::ranges::sort(files);
  return files;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_corpus_input_is_accepted_or_rejected_cleanly) {
  // A missing or emptied folder must not pass as "nothing went wrong".
  BOOST_TEST_REQUIRE(std::filesystem::is_directory(CKPT_CORPUS_DIR));
  const std::vector<std::filesystem::path> files = corpus_files();
  BOOST_TEST_REQUIRE(files.size() >= 10u);

  const ckpt_test::temp_dir scratch;
  std::size_t accepted = 0;
  for (const std::filesystem::path& file : files) {
    BOOST_TEST_CONTEXT(file.filename().string()) {
      const std::string bytes = ckpt_test::read_bytes(file);
      try {
        const auto v = ckpt_fuzz::exercise(std::as_bytes(std::span(bytes)), {.scratch = scratch.path()});
        accepted += v == ckpt_fuzz::verdict::accepted;
      } catch (const std::exception& e) {
        BOOST_ERROR("unexpected exception: " << e.what());
      }
    }
  }
  BOOST_TEST_MESSAGE(accepted << " of " << files.size() << " inputs accepted");
  // The corpus exercises both sides: files the reader takes, and files it refuses.
  BOOST_TEST(accepted > 0u);
  BOOST_TEST(accepted < files.size());
}

BOOST_AUTO_TEST_SUITE_END()  // test_corpus

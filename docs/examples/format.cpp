// docs/guide.md, "File-format guarantees". The lines between two `// [name]` markers are the
// guide's code block `format.cpp#name` (tests/test_docs.cpp checks that the guide shows them
// unchanged); the test cases below run them.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

// Overwrites one byte of `path` at `offset` with its complement, as a bad disk sector would.
void flip_byte(const std::filesystem::path& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(~f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
}

ckpt::checkpoint weights() {
  return ckpt::of_params(Eigen::MatrixXf::Constant(4, 4, 1.5f).eval(), "w");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_format)

BOOST_AUTO_TEST_CASE(the_digest_detects_a_changed_data_byte) {
  const ckpt::checkpoint t = weights();
  // [digest]
  ckpt::save("weights.safetensors", t);  // __metadata__ "ckpt.xxh3_64_file", by default
  // ... a byte of the file changes on disk ...
  // [digest]
  const auto size = std::filesystem::file_size("weights.safetensors");
  flip_byte("weights.safetensors", size - 1);
  std::string message;
  // [digest_check]
  try {
    (void)ckpt::load("weights.safetensors");
  } catch (const ckpt::integrity_error& e) {  // a ckpt::format_error
    message = e.what();  // "ckpt: 'weights.safetensors' is corrupted: its bytes hash to ..."
  }
  // Trusting the file instead: the header rules still apply, nothing is hashed.
  const ckpt::checkpoint as_is = ckpt::load("weights.safetensors", {.verify_digest = false});
  // [digest_check]
  BOOST_TEST(message.starts_with("ckpt: 'weights.safetensors' is corrupted: its bytes hash to "));
  BOOST_TEST(message.find("but its __metadata__ entry 'ckpt.xxh3_64_file' records ") != std::string::npos);
  BOOST_TEST(as_is.metadata().contains("ckpt.xxh3_64_file"));
  BOOST_TEST(!(as_is.get("w") == t.get("w")));

  ckpt::save("plain.safetensors", t, {.digest = false});  // no digest: the caller opts out
  BOOST_TEST(!ckpt::load("plain.safetensors").metadata().contains("ckpt.xxh3_64_file"));
}

BOOST_AUTO_TEST_CASE(a_truncated_file_is_a_format_error_naming_the_rule) {
  ckpt::save("whole.safetensors", weights());
  std::filesystem::copy_file("whole.safetensors", "cut.safetensors");
  std::filesystem::resize_file("cut.safetensors", std::filesystem::file_size("whole.safetensors") - 4);
  std::string rule;
  // [format_error]
  try {
    (void)ckpt::load("cut.safetensors");
  } catch (const ckpt::format_error& e) {
    // e.what(): "ckpt: 'cut.safetensors' is not a valid safetensors file: " + e.rule()
    rule = e.rule();
  }
  // [format_error]
  BOOST_TEST(rule == "entry 'w' has data_offsets [0, 64] past the end of the 60-byte data buffer");
}

BOOST_AUTO_TEST_CASE(a_save_leaves_no_temporary_file) {
  ckpt::save("atomic.safetensors", weights());
  ckpt::save("atomic.safetensors", weights());  // replaces it
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(".")) files += e.path().filename().string().find("atomic") != std::string::npos;
  BOOST_TEST(files == 1);
}

BOOST_AUTO_TEST_SUITE_END()

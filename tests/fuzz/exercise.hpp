// What the fuzz target and the corpus replay (tests/test_corpus.cpp) do with one input: the body
// of the fuzzer kept in a header so that the normal g++ build and the ASan build run the very
// same checks over tests/corpus/ that libFuzzer ran over millions of inputs.
//
// The rule: bytes from a stranger may be rejected with std::invalid_argument or a ckpt::error,
// nothing else. Once a file is accepted, every public way of reading it must work on it, and
// different ways must agree (parse vs load, an entry vs its cast vs its extraction, a checkpoint
// vs its saved-and-reloaded copy). A disagreement throws exercise_failure, which no caller
// treats as expected: libFuzzer reports it as a crash, Boost.Test as an error.
#pragma once

#include <ckpt/ckpt.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt_fuzz {

/// A broken invariant: a bug, never an answer to bad input.
class exercise_failure : public std::exception {
 public:
  explicit exercise_failure(std::string what) : what_(std::move(what)) {}
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// How much to do besides parsing in memory.
struct exercise_options {
  /// A folder for scratch files: if set, the input also goes through `ckpt::load` (the mmap
  /// path), and an accepted checkpoint through `ckpt::save` and back.
  std::optional<std::filesystem::path> scratch;
};

/// What happened to one input.
enum class verdict { accepted, rejected };

namespace detail {

// Larger likes cost time without reaching other code: the shapes stay as the file gives them.
inline constexpr std::int64_t max_like_elements = std::int64_t{1} << 20;

inline void require(bool ok, std::string_view what) {
  if (!ok) throw exercise_failure("ckpt_fuzz: " + std::string(what));
}

inline bool same_bits(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

inline void require_equal(const ckpt::checkpoint& a, const ckpt::checkpoint& b, std::string_view how) {
  require(a.names() == b.names(), std::string(how) + ": different names");
  require(a.metadata() == b.metadata(), std::string(how) + ": different metadata");
  for (const auto& [name, x] : a) {
    const ckpt::tensor& y = b.get(name);
    require(x.dtype() == y.dtype() && std::ranges::equal(x.shape(), y.shape()) && same_bits(x.bytes(), y.bytes()),
            std::string(how) + ": entry '" + name + "' differs");
  }
}

// Reads every byte, so that a view past its storage shows up under ASan.
inline unsigned touch(std::span<const std::byte> bytes) {
  unsigned sum = 0;
  for (const std::byte b : bytes) sum += std::to_integer<unsigned>(b);
  return sum;
}

template <class Map, class View>
void require_same_elements(const Map& got, const View& want, const std::string& name) {
  require(got.rows() == want.rows() && got.cols() == want.cols(), "extraction of '" + name + "' has another size");
  for (Eigen::Index i = 0; i < want.rows(); ++i)
    for (Eigen::Index j = 0; j < want.cols(); ++j) {
      const double g = got(i, j), w = want(i, j);
      require(std::memcmp(&g, &w, sizeof g) == 0, "extraction of '" + name + "' has other values");
    }
}

// The entry as Eigen leaves: a double (rank 0), a vector (rank 1), a matrix (rank 2, which goes
// through the C-order-to-column-major transposition) and a rank-3 tensor, converted to F64.
inline void extract_as_eigen(const ckpt::checkpoint& t, const std::string& name, const ckpt::tensor& x) {
  // The packed dtypes (F6, F4) convert to nothing else.
  if (ckpt::detail::is_sub_byte(x.dtype()) || x.numel() > max_like_elements) return;
  const ckpt::tensor as_f64 = ckpt::cast(x, ckpt::dtype::f64);
  require(std::ranges::equal(as_f64.shape(), x.shape()), "cast of '" + name + "' changed its shape");
  const ckpt::extract_options opts{.prefix = name, .cast = true};
  const auto shape = x.shape();
  switch (shape.size()) {
    case 0: {
      const double got = ckpt::to_params(t, 0.0, opts);
      const double want = as_f64.as<double>()[0];
      require(std::memcmp(&got, &want, sizeof got) == 0, "scalar extraction of '" + name + "' differs");
      break;
    }
    case 1: {
      const Eigen::VectorXd got = ckpt::to_params(t, Eigen::VectorXd(shape[0]), opts);
      require_same_elements(got, ckpt::matrix_view<double>(as_f64), name);
      break;
    }
    case 2: {
      const Eigen::MatrixXd got = ckpt::to_params(t, Eigen::MatrixXd(shape[0], shape[1]), opts);
      require_same_elements(got, ckpt::matrix_view<double>(as_f64), name);
      break;
    }
    case 3: {
      const Eigen::Tensor<double, 3> got =
          ckpt::to_params(t, Eigen::Tensor<double, 3>(shape[0], shape[1], shape[2]), opts);
      const auto want = ckpt::tensor_view<double, 3>(as_f64);
      for (Eigen::Index i = 0; i < shape[0]; ++i)
        for (Eigen::Index j = 0; j < shape[1]; ++j)
          for (Eigen::Index k = 0; k < shape[2]; ++k) {
            const double g = got(i, j, k), w = want(i, j, k);
            require(std::memcmp(&g, &w, sizeof g) == 0, "rank-3 extraction of '" + name + "' differs");
          }
      break;
    }
    default: break;
  }
}

// A ptree `like` with the structure the names spell (split at '.'), each leaf an F32 tensor of the
// entry's shape (the entry's own dtype where it cannot be cast), as a user resuming a model of
// unknown structure would build it. Names that cannot sit in one tree together are left out.
inline ckpt::ptree like_of(const ckpt::checkpoint& t, std::vector<std::string>& used) {
  ckpt::ptree root;
  std::int64_t budget = max_like_elements;
  for (const auto& [name, x] : t) {
    if (x.numel() > budget) continue;
    std::vector<std::string_view> path;
    for (std::size_t begin = 0;;) {
      const std::size_t dot = name.find('.', begin);
      path.push_back(std::string_view(name).substr(begin, dot - begin));
      if (dot == std::string::npos) break;
      begin = dot + 1;
    }
    if (std::ranges::any_of(path, [](std::string_view s) { return s.empty(); })) continue;
    ckpt::ptree* node = &root;
    bool fits = true;
    for (std::size_t i = 0; fits && i + 1 < path.size(); ++i) {
      auto& dict = node->as_dict();
      auto it = std::ranges::find_if(dict, [&](const auto& kv) { return kv.first == path[i]; });
      if (it == dict.end()) {
        dict.emplace_back(std::string(path[i]), ckpt::ptree());
        it = std::prev(dict.end());
      }
      node = &it->second;
      fits = node->is_dict();
    }
    if (!fits) continue;
    auto& dict = node->as_dict();
    if (std::ranges::any_of(dict, [&](const auto& kv) { return kv.first == path.back(); })) continue;
    const ckpt::dtype type = ckpt::detail::is_sub_byte(x.dtype()) ? x.dtype() : ckpt::dtype::f32;
    ckpt::dims shape(x.shape().begin(), x.shape().end());
    dict.emplace_back(std::string(path.back()), ckpt::ptree::tensor(ckpt::tensor::make(
                                                    type, std::move(shape), [](std::span<std::byte> out) {
                                                      std::ranges::fill(out, std::byte{0});
                                                    })));
    budget -= x.numel();
    used.push_back(name);
  }
  return root;
}

inline void extract_as_ptree(const ckpt::checkpoint& t) {
  std::vector<std::string> used;
  const ckpt::ptree like = like_of(t, used);
  const ckpt::ptree got = ckpt::to_params(t, like, {.prefix = {}, .cast = true});
  for (const std::string& name : used) {
    const ckpt::ptree* node = &got;
    for (std::size_t begin = 0;;) {
      const std::size_t dot = name.find('.', begin);
      node = &node->at(std::string_view(name).substr(begin, dot - begin));
      if (dot == std::string::npos) break;
      begin = dot + 1;
    }
    const ckpt::tensor& x = t.get(name);
    const ckpt::tensor& leaf = node->as_tensor();
    const ckpt::tensor want = ckpt::cast(x, leaf.dtype());
    require(leaf == want, "ptree extraction of '" + name + "' differs from its cast");
  }
}

// Every public reading of an accepted checkpoint.
inline void exercise_checkpoint(const ckpt::checkpoint& t) {
  const std::vector<std::string> names = t.names();
  require(names.size() == t.size(), "names() and size() disagree");
  require(std::ranges::is_sorted(names), "names() is not sorted");
  unsigned sum = 0;
  for (const auto& [key, value] : t.metadata()) sum += touch(std::as_bytes(std::span(key))) + touch(std::as_bytes(std::span(value)));
  for (const std::string& name : names) {
    const ckpt::tensor& x = t.get(name);
    require(t.find(name) == &x && t.contains(name), "find() and get() disagree on '" + name + "'");
    require(x.nbytes() == ckpt::detail::nbytes_of(x.dtype(), ckpt::detail::numel_of(x.shape())),
            "'" + name + "' has a wrong byte count");
    sum += touch(x.bytes());
    if (x.dtype() == ckpt::dtype::i32 && x.numel() == 1) {
      require(ckpt::to_int(name, t) == x.as<std::int32_t>()[0], "to_int of '" + name + "' differs");
    } else if (x.dtype() == ckpt::dtype::i64 && x.numel() == 1) {
      require(ckpt::to_int(name, t) == x.as<std::int64_t>()[0], "to_int of '" + name + "' differs");
    } else {
      try {
        (void)ckpt::to_int(name, t);
        require(false, "to_int accepted '" + name + "'");
      } catch (const std::invalid_argument&) {
      }
    }
    if (x.dtype() == ckpt::dtype::f32 && x.rank() <= 2) sum += static_cast<unsigned>(ckpt::matrix_view<float>(x).size());
    extract_as_eigen(t, name, x);
  }
  extract_as_ptree(t);
  static_cast<void>(sum);
}

// The same bytes through a file: load must agree with parse, accepting or rejecting alike.
inline void through_files(std::span<const std::byte> bytes, const std::optional<ckpt::checkpoint>& parsed,
                          const std::string& parse_rule, const std::filesystem::path& scratch) {
  const std::filesystem::path input = scratch / "input.safetensors";
  {
    std::ofstream out(input, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    require(static_cast<bool>(out.flush()), "cannot write " + input.string());
  }
  std::optional<ckpt::checkpoint> loaded;
  try {
    loaded = ckpt::load(input);
  } catch (const ckpt::format_error& e) {
    require(!parsed, "load rejected what parse accepted: " + std::string(e.what()));
    require(e.rule() == parse_rule, "load and parse reject for different reasons: '" + e.rule() + "' vs '" + parse_rule + "'");
    return;
  }
  require(parsed.has_value(), "load accepted what parse rejected: " + parse_rule);
  require_equal(*parsed, *loaded, "load vs parse");
  // What was read must be written back so that it reads the same (names with any bytes JSON
  // strings may hold, metadata, every dtype).
  const std::filesystem::path copy = scratch / "roundtrip.safetensors";
  ckpt::save(copy, *loaded, {.digest = false});
  // save drops the digests ckpt owns, today's and those of earlier versions (a digest read with
  // the file would describe other data once anything changes; none is written again here), and
  // adds "format": "pt" where the file had no "format"; everything else comes back.
  ckpt::metadata_map expected = loaded->metadata();
  for (const char* key : {"ckpt.xxh3_64_file", "ckpt.xxh3_64_per_mib", "ckpt.xxh3_64"}) expected.erase(key);
  expected.try_emplace("format", "pt");
  require_equal(loaded->with_metadata(std::move(expected)), ckpt::load(copy), "save and load again");
}

}  // namespace detail

/// Runs every check on `bytes`. Returns whether the reader accepted them; throws
/// exercise_failure (or any unexpected exception) on a bug.
inline verdict exercise(std::span<const std::byte> bytes, const exercise_options& options = {}) {
  std::optional<ckpt::checkpoint> parsed;
  std::string rule;
  try {
    parsed = ckpt::parse(bytes, "<fuzz>");
  } catch (const ckpt::format_error& e) {
    rule = e.rule();
  }
  // Once the file is accepted nothing may throw: the likes above are built to fit the entries,
  // so even an std::invalid_argument there is a bug.
  if (parsed) detail::exercise_checkpoint(*parsed);
  if (options.scratch) detail::through_files(bytes, parsed, rule, *options.scratch);
  return parsed ? verdict::accepted : verdict::rejected;
}

}  // namespace ckpt_fuzz

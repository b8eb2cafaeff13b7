#pragma once
// Not part of the API: the key of ckpt's digest entry, which ckpt::digest_key (ckpt/file.hpp)
// publishes; here so that the format's parser (src/safetensors.cpp) knows it without the file
// reader and writer above it.

#include <string_view>

namespace ckpt::detail {

inline constexpr std::string_view digest_key = "ckpt.xxh3_64_file";

}  // namespace ckpt::detail

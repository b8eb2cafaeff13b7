#pragma once
// A checkpoint_manager's run in a bucket (`checkpoint_manager("s3://bucket/run")`, issue 40): the
// same manager (ckpt/manager.hpp: one class, one core of rules, src/run/manager_core.hpp), its run's
// files objects under a prefix instead of files in a folder (src/run/bucket_run.cpp).

#include "manager_core.hpp"

#include <filesystem>
#include <memory>

namespace ckpt::detail::s3 {

// Opens the run `url` (`s3://bucket/prefix`) for a checkpoint_manager with `options`.
// \throws std::invalid_argument for a bad URL or missing credentials; remote_error if the bucket
// cannot be listed.
[[nodiscard]] std::unique_ptr<manager_state> open_run(std::filesystem::path url, manager_options options);

}  // namespace ckpt::detail::s3

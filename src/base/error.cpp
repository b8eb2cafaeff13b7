#include <ckpt/error.hpp>

#include <utility>

namespace ckpt {

error::error(std::filesystem::path path, const std::string& what)
    : std::runtime_error(what), path_(std::move(path)) {}
error::~error() = default;

io_error::io_error(std::filesystem::path path, const std::string& operation, std::error_code code)
    : error(path, "ckpt: cannot " + operation + " '" + path.string() + "': " + code.message()), code_(code) {}
io_error::~io_error() = default;

format_error::format_error(std::filesystem::path path, const std::string& rule)
    : error(path, "ckpt: '" + path.string() + "' is not a valid safetensors file: " + rule), rule_(rule) {}
format_error::format_error(std::filesystem::path path, std::string rule, const std::string& what)
    : error(std::move(path), what), rule_(std::move(rule)) {}
format_error::~format_error() = default;

integrity_error::integrity_error(std::filesystem::path path, const std::string& key, const std::string& expected,
                                 const std::string& computed)
    : format_error(path, "its bytes hash to " + computed + " but its __metadata__ entry '" + key + "' records " + expected,
                   "ckpt: '" + path.string() + "' is corrupted: its bytes hash to " + computed +
                       " but its __metadata__ entry '" + key + "' records " + expected),
      expected_(expected),
      computed_(computed) {}
integrity_error::integrity_error(std::filesystem::path path, std::string expected, std::string computed, std::string rule,
                                 const std::string& what)
    : format_error(std::move(path), std::move(rule), what), expected_(std::move(expected)), computed_(std::move(computed)) {}
integrity_error::~integrity_error() = default;

lock_error::lock_error(const std::filesystem::path& folder, const std::filesystem::path& lock_file)
    : error(folder, "ckpt: the checkpoint folder '" + folder.string() +
                        "' is in use by another checkpoint_manager (lock file '" + lock_file.string() + "')") {}
lock_error::~lock_error() = default;

remote_error::remote_error(const std::string& url, const std::string& method, long status, std::string code,
                           const std::string& message)
    : error(url, "ckpt: s3: " + method + " '" + url + "' failed: " +
                     (status == 0 ? message
                                  : "HTTP " + std::to_string(status) + (code.empty() ? "" : " " + code) +
                                        (message.empty() ? "" : ": " + message))),
      status_(status),
      code_(std::move(code)) {}
remote_error::~remote_error() = default;

namespace {

std::string mixed_save_message(const std::filesystem::path& index, const std::filesystem::path& shard,
                               const std::string& index_save, const std::string& shard_save) {
  return "ckpt: the shard '" + shard.string() + "' is " +
         (shard_save.empty() ? "of a save without an id" : "of save " + shard_save) + ", not of save " + index_save +
         " that its index '" + index.string() +
         "' names: the sharded checkpoint was saved again while it was read (load it again)";
}

}  // namespace

mixed_save_error::mixed_save_error(const std::filesystem::path& index, const std::filesystem::path& shard,
                                   std::string index_save, std::string shard_save)
    : error(index, mixed_save_message(index, shard, index_save, shard_save)),
      shard_(shard),
      index_save_(std::move(index_save)),
      shard_save_(std::move(shard_save)) {}

mixed_save_error::~mixed_save_error() = default;

}  // namespace ckpt

// A run's store under a prefix of a bucket (src/run/store.hpp), with S3 support only: every name a
// key below the prefix (a folder is the keys below `<name>/`), files written by multipart uploads
// that make the object appear whole (src/s3/transfer.hpp), read by ranged GETs
// (src/format/object_file.hpp). A bucket has no lock.
#include "store.hpp"

#include <ckpt/error.hpp>

#include "format/object_file.hpp"
#include "format/remote.hpp"
#include "format/safetensors.hpp"
#include "io/folder.hpp"
#include "io/remote_path.hpp"
#include "s3/client.hpp"
#include "s3/transfer.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

namespace ckpt::detail {

namespace {

class bucket_file final : public store::file {
 public:
  bucket_file(const s3::config& settings, s3::object target, store::existing rule)
      : upload_(settings, std::move(target), {},
                rule == store::existing::kept ? s3::upload::existing::kept : s3::upload::existing::replaced) {}
  byte_sink& sink() noexcept override { return upload_; }
  bool commit() override { return upload_.commit(); }

 private:
  s3::upload upload_;
};

class bucket_store final : public store {
 public:
  explicit bucket_store(const std::filesystem::path& url)
      : settings_(s3::config::from_environment()),
        root_(s3::object::parse(url.native(), /*key_required=*/false)),
        client_(settings_) {
    while (root_.key.ends_with('/')) root_.key.pop_back();
    if (!root_.key.empty()) root_.key += '/';
  }

  std::filesystem::path path_of(std::string_view name) const override {
    if (name.empty()) return s3::object{root_.bucket, root_.key.empty() ? root_.key : root_.key.substr(0, root_.key.size() - 1)}.url();
    return key(name).url();
  }

  std::vector<entry> list(std::string_view folder) const override {
    const auto lock = hold_client();
    const std::string under = root_.key + (folder.empty() ? std::string() : std::string(folder) + "/");
    std::vector<entry> out;
    std::set<std::string, std::less<>> folders;
    for (const s3::object_info& o : client_.list(root_.bucket, under)) {
      const std::string rest = o.key.substr(under.size());  // the client checks every key is under it
      if (const std::size_t slash = rest.find('/'); slash != std::string::npos) {
        if (folders.insert(rest.substr(0, slash)).second) out.push_back({rest.substr(0, slash), kind::folder});
      } else if (!rest.empty()) {
        out.push_back({rest, kind::file});
      }
    }
    return out;
  }

  std::optional<kind> find(std::string_view name, bool) const override {
    const auto lock = hold_client();
    if (client_.head(key(name))) return kind::file;
    if (!client_.list(root_.bucket, key(name).key + "/", 1).empty()) return kind::folder;
    return std::nullopt;
  }

  checkpoint load(std::string_view name, const load_options& options) const override {
    return ckpt::load(key(name).url(), options);
  }

  metadata_map metadata(std::string_view name) const override {
    const auto lock = hold_client();
    const s3::object o = key(name);
    return header_metadata(s3::read_head(client_, o), o.url());
  }

  std::optional<std::string> read(std::string_view name, std::size_t limit) const override {
    const auto lock = hold_client();
    const s3::object o = key(name);
    std::string text;
    try {
      text = client_.get(o);
    } catch (const remote_error& e) {
      if (e.status() == 404 && e.code() != "NoSuchBucket") return std::nullopt;
      throw;
    }
    if (text.size() > limit)
      throw error(o.url(), "ckpt: '" + o.url() + "' is longer than the " + std::to_string(limit) + " bytes such a file holds");
    return text;
  }

  std::unique_ptr<file> create(std::string_view name, existing rule, write_path) const override {
    return std::make_unique<bucket_file>(settings_, key(name), rule);
  }

  bool write(std::string_view name, std::string_view text, existing rule) const override {
    bucket_file out(settings_, key(name), rule);
    std::vector<iovec> pieces{{const_cast<char*>(text.data()), text.size()}};
    out.sink().begin(text.size());
    out.sink().write(pieces);
    return out.commit();
  }

  bool remove(std::string_view name) const override {
    const auto lock = hold_client();
    if (client_.head(key(name))) {
      client_.remove(key(name));
      return true;
    }
    const std::vector<std::string> keys = keys_under(name);
    for (const std::string& k : keys) client_.remove({root_.bucket, k});
    return !keys.empty();
  }

  // A server-side copy, then the delete: a reader in between sees both names, never neither.
  bool rename_unless_taken(std::string_view from, std::string_view to) const override {
    const auto lock = hold_client();
    if (find(to, false)) return false;
    if (client_.head(key(from))) {
      client_.copy(key(from), key(to));
      client_.remove(key(from));
      return true;
    }
    const std::vector<std::string> keys = keys_under(from);
    if (keys.empty()) throw io_error(path_of(from), "set aside", std::make_error_code(std::errc::no_such_file_or_directory));
    const std::string from_prefix = key(from).key + "/", to_prefix = key(to).key + "/";
    for (const std::string& k : keys) client_.copy({root_.bucket, k}, {root_.bucket, to_prefix + k.substr(from_prefix.size())});
    for (const std::string& k : keys) client_.remove({root_.bucket, k});
    return true;
  }

  std::optional<file_descriptor> hold(std::string_view) const override { return std::nullopt; }

  std::shared_ptr<std::byte[]> fetch(std::string_view name, std::size_t& size) const override {
    try {
      return s3::download(settings_, key(name), size);
    } catch (const remote_error& e) {
      // A missing file, as a folder says it: a step that names it is damaged.
      if (e.status() == 404 && e.code() != "NoSuchBucket")
        throw io_error(path_of(name), "read", std::make_error_code(std::errc::no_such_file_or_directory));
      throw;
    }
  }

  // The parts go on clients of their own: a rank's parts are its own requests, in parallel with
  // the other ranks'.
  std::string start_parts(std::string_view name) const override {
    const auto lock = hold_client();
    return client_.start_upload(key(name));
  }

  std::string put_part(std::string_view name, const std::string& id, int number,
                       std::span<const std::byte> bytes) const override {
    s3::client c(settings_);
    return c.upload_part(key(name), id, number, bytes);
  }

  bool finish_parts(std::string_view name, const std::string& id, const std::vector<std::string>& tags,
                    std::uint64_t size, existing rule) const override {
    const auto lock = hold_client();
    const s3::object o = key(name);
    return s3::commit_object(
        client_, o, rule == existing::kept ? s3::upload::existing::kept : s3::upload::existing::replaced,
        /*multipart=*/true, [&](bool if_absent) { return client_.complete_upload(o, id, tags, if_absent); },
        [&] {
          const std::optional<s3::object_info> there = client_.head(o);
          return there && there->size == size;
        });
  }

  void abort_parts(std::string_view name, const std::string& id) const noexcept override {
    try {
      const auto lock = hold_client();
      client_.abort_upload(key(name), id);
    } catch (...) {  // an upload left open is abandoned by the next writer (abandon_writes)
    }
  }

  void abandon_writes(const std::function<bool(std::string_view name)>& ours) const override {
    const auto lock = hold_client();
    for (const s3::upload_info& u : client_.uploads(root_.bucket, root_.key))
      if (ours(std::string_view(u.key).substr(root_.key.size()))) client_.abort_upload({root_.bucket, u.key}, u.upload_id);
  }

 private:
  [[nodiscard]] s3::object key(std::string_view name) const { return {root_.bucket, root_.key + std::string(name)}; }
  [[nodiscard]] std::vector<std::string> keys_under(std::string_view folder) const {
    const auto lock = hold_client();
    std::vector<std::string> keys;
    for (const s3::object_info& o : client_.list(root_.bucket, key(folder).key + "/")) keys.push_back(o.key);
    return keys;
  }

  // The store's client, one request at a time: a manager's caller and its background save share
  // the store (an upload has clients of its own). Recursive: a rename looks first.
  [[nodiscard]] std::unique_lock<std::recursive_mutex> hold_client() const { return std::unique_lock(mutex_); }

  s3::config settings_;
  s3::object root_;  // the prefix: "" or ending with '/'
  mutable s3::client client_;
  mutable std::recursive_mutex mutex_;
};

}  // namespace

std::unique_ptr<store> open_store(const std::filesystem::path& where, bool create) {
  if (is_remote(where)) return std::make_unique<bucket_store>(where);
  return open_folder_store(where, create);
}

}  // namespace ckpt::detail

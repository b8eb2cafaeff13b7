// A checkpoint_manager's run in a bucket (src/run/bucket_run.hpp): a file a step, as in a folder
// (`<prefix>/ckpt-<step, 10 digits>.safetensors`), each written by a multipart upload that makes
// the object appear whole, on the one manager core (src/run/manager_core.hpp).
#include "bucket_run.hpp"

#include "format/object_file.hpp"
#include "format/safetensors.hpp"
#include "s3/client.hpp"
#include "structures/snapshot.hpp"

#include <ckpt/section.hpp>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

namespace ckpt::detail::s3 {

namespace {

std::optional<std::int64_t> step_of(std::string_view name) {
  return step_in_name(name, file_step_prefix, file_step_suffix);
}

std::string name_of(std::int64_t step) { return step_name(file_step_prefix, step, file_step_suffix); }

// A run under `prefix` of `bucket`: every name is a key below it. There is no lock in a bucket:
// two writers of one run are the caller's to avoid (ckpt/manager.hpp).
class remote_run final : public manager_state {
 public:
  remote_run(std::filesystem::path url, manager_options options)
      : manager_state("checkpoint_manager", url, std::move(options)),
        settings_(config::from_environment()),
        run_(object::parse(url.native(), /*key_required=*/false)),
        client_(settings_) {
    while (run_.key.ends_with('/')) run_.key.pop_back();
    prefix_ = run_.key.empty() ? std::string() : run_.key + "/";
  }
  ~remote_run() override { static_cast<void>(background.join()); }

  // Lists the run's steps; unless read-only, aborts the uploads of its own steps that a killed
  // writer left (none of ours is under way: this manager has just opened) and applies the
  // retention rules.
  void open() {
    std::vector<std::int64_t> steps;
    for (const object_info& o : client_.list(run_.bucket, prefix_)) {
      const std::string name = o.key.substr(prefix_.size());
      if (name.find('/') != std::string::npos) continue;  // a deeper prefix: not this run's
      if (const auto step = step_of(name)) steps.push_back(*step);
      else if (const auto aside = step_set_aside(name, file_step_prefix, file_step_suffix))
        core.mark_damaged(*aside, url_of(name), "set aside as damaged by an earlier run");
    }
    if (!core.options().read_only)
      for (const upload_info& u : client_.uploads(run_.bucket, prefix_))
        if (const std::string name = u.key.substr(prefix_.size()); step_of(name)) client_.abort_upload({run_.bucket, u.key}, u.upload_id);
    const auto unreadable = core.add_existing(steps, [this](std::int64_t step) { return metadata_of(name_of(step)); });
    for (const auto& [step, reason] : unreadable) static_cast<void>(set_aside(step, reason));
    if (!core.options().read_only) retain();
  }

  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const override {
    core.check_not_negative(step);
    return url_of(name_of(step));
  }

  void settle() override {
    if (!background.pending()) return;
    if (const std::exception_ptr error = background.join()) std::rethrow_exception(error);
    commit(pending_step_, pending_metadata_);
  }

  std::optional<metadata_map> admit(std::int64_t step, const metadata_map& metadata, bool force) override {
    return admit_here(core, step, metadata, force);
  }

  void save_now(std::int64_t step, std::span<const section> sections, const metadata_map& metadata) override {
    upload(name_of(step), ordered_entries(sections, "save"), metadata);
    commit(step, metadata);
  }

  void save_in_background(std::int64_t step, std::span<const section> sections,
                          const metadata_map& metadata) override {
    pending_step_ = step;
    pending_metadata_ = metadata;
    background.start([this, name = name_of(step),
                      snapshot = std::make_shared<taken_snapshot>(take_snapshot(arena, sections, metadata, {.lazily = true}))] {
      snapshot->finish();
      background_write::yield();
      const section whole(snapshot->data());
      upload(name, ordered_entries({&whole, 1}, "save"), snapshot->data().metadata());
    });
  }

  checkpoint load_step(std::int64_t step, const load_options& options) override {
    last_sources = {{name_of(step), checkpoint_manager::tier::folder, 0}};
    return load(url_of(name_of(step)), options);
  }

  std::vector<step_status> remove_damaged() override { return core.remove_set_aside(files()); }

  bool gone(std::int64_t step) override {
    try {
      return !client_.head(key(name_of(step))).has_value();
    } catch (const std::exception&) {
      return false;
    }
  }

  step_status set_aside(std::int64_t step, const std::string& reason) override {
    return core.set_aside(step, files(), name_of(step), reason);
  }

 private:
  [[nodiscard]] object key(const std::string& name) const { return {run_.bucket, prefix_ + name}; }
  [[nodiscard]] std::filesystem::path url_of(const std::string& name) const { return key(name).url(); }

  // Writes the step file `name` (its own client: the background thread's or this one's turn),
  // never over an object there: another writer of the run may have committed the step since this
  // manager listed it (see upload::commit for how far a server without conditional writes
  // guarantees it).
  void upload(const std::string& name, entry_list entries, const metadata_map& metadata) const {
    if (!write_object(settings_, key(name), entries, metadata, save_options{.digest = core.options().digest},
                      upload::existing::kept))
      throw io_error(url_of(name),
                     "commit the step (another writer of the run committed it since this manager listed the run: a "
                     "step is never overwritten) at",
                     std::make_error_code(std::errc::file_exists));
  }

  // The metadata of the step file `name`, from its header alone (read_head: one ranged read).
  metadata_map metadata_of(const std::string& name) {
    const object o = key(name);
    return header_metadata(read_head(client_, o), o.url());
  }

  // The run's objects, for the core's set-aside (a server-side copy, then the delete) and removal.
  [[nodiscard]] run_files files() {
    return {[this](const std::string& from, const std::string& to) {
              if (client_.head(key(to))) return false;
              if (!client_.head(key(from)))
                throw io_error(url_of(from), "set aside", std::make_error_code(std::errc::no_such_file_or_directory));
              client_.copy(key(from), key(to));
              client_.remove(key(from));
              return true;
            },
            [this](const std::string& name) { client_.remove(key(name)); },
            [this](const std::string& name) { return url_of(name); }};
  }

  void commit(std::int64_t step, const metadata_map& metadata) {
    core.add(step, metadata);
    retain();
  }

  // Deletes what the rules drop, once the new step is whole in the bucket.
  void retain() {
    core.retain([this](std::int64_t step) { client_.remove(key(name_of(step))); });
  }

  config settings_;
  object run_;
  std::string prefix_;  // the run's key prefix, "" or ending with '/'
  client client_;       // the caller's thread's
  std::int64_t pending_step_ = 0;
  metadata_map pending_metadata_;
};

}  // namespace

std::unique_ptr<manager_state> open_run(std::filesystem::path url, manager_options options) {
  auto state = std::make_unique<remote_run>(std::move(url), std::move(options));
  state->open();
  return state;
}

}  // namespace ckpt::detail::s3

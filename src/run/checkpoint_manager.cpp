// ckpt::checkpoint_manager's members (include/ckpt/manager.hpp): the one implementation of the
// rules over every manager's policy (src/run/policy.hpp), the single process's and the MPI job's.
#include <ckpt/manager.hpp>

#include <ckpt/detail/section_access.hpp>

#include "format/reader.hpp"
#include "policy.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace ckpt::detail {

metadata_map manager_state::given_metadata(std::span<const section> sections, const metadata_map& metadata,
                                           std::string_view operation) {
  return merged_metadata(sections, metadata, core.who() + ": " + std::string(operation));
}

void manager_state::settle_quietly() noexcept {
  try {
    settle_all();
  } catch (...) {
    report_uncollected(core.who(), core.folder(), std::current_exception());
  }
}

}  // namespace ckpt::detail

// ckpt::checkpoint_manager's members: the rules, over the state of either manager.
namespace ckpt {

using detail::manager_state;
using detail::step_status;

checkpoint_manager::checkpoint_manager(std::unique_ptr<manager_state> state) noexcept
    : state_(std::move(state)) {}

checkpoint_manager::checkpoint_manager(std::filesystem::path folder, checkpoint_manager::options opts)
    : checkpoint_manager(detail::open_single_process(std::move(folder), std::move(opts))) {}

checkpoint_manager::checkpoint_manager(std::filesystem::path folder) : checkpoint_manager(std::move(folder), options{}) {}

checkpoint_manager::~checkpoint_manager() {
  if (state_) state_->settle_quietly();
}

checkpoint_manager::checkpoint_manager(checkpoint_manager&& other) noexcept = default;

checkpoint_manager& checkpoint_manager::operator=(checkpoint_manager&& other) noexcept {
  if (this != &other) {
    if (state_) state_->settle_quietly();
    state_ = std::move(other.state_);
  }
  return *this;
}

const std::filesystem::path& checkpoint_manager::folder() const noexcept { return state_->core.folder(); }

std::filesystem::path checkpoint_manager::path_of(std::int64_t step) const { return state_->path_of(step); }

bool checkpoint_manager::should_save(std::int64_t step) const noexcept { return state_->core.should_save(step); }

namespace {

// save and save_async: the checks, then the write now or in the background.
bool save_step(manager_state& state, std::int64_t step, std::span<const section> sections,
               const metadata_map& metadata, bool force, bool background) {
  if (state.core.options().read_only)
    throw std::invalid_argument(state.core.message(std::string(background ? "save_async" : "save") +
                                                   ": the folder '" + state.core.folder().string() +
                                                   "' was opened read-only"));
  // Settling first also frees the previous snapshot, whose buffer a background save then reuses.
  state.settle();
  const std::optional<metadata_map> merged =
      state.admit(step, state.given_metadata(sections, metadata, background ? "save_async" : "save"), force);
  if (!merged) return false;
  if (background) state.save_in_background(step, sections, *merged);
  else state.save_now(step, sections, *merged);
  return true;
}

}  // namespace

bool checkpoint_manager::save(std::int64_t step, std::span<const section> sections,
                                   const metadata_map& metadata, bool force) {
  return save_step(*state_, step, sections, metadata, force, false);
}

bool checkpoint_manager::save_async(std::int64_t step, std::span<const section> sections,
                                         const metadata_map& metadata, bool force) {
  return save_step(*state_, step, sections, metadata, force, true);
}

void checkpoint_manager::wait() { state_->settle_all(); }

std::vector<std::int64_t> checkpoint_manager::steps() const { return state_->core.steps(); }

std::optional<std::int64_t> checkpoint_manager::latest_step() const noexcept { return state_->core.latest_step(); }

std::vector<step_status> checkpoint_manager::status() const {
  return state_->core.status([this](std::int64_t step) { return state_->path_of(step); });
}

namespace {

// Loads committed `step`; if it is damaged, sets it aside (recorded in the core) and throws the
// load's error.
// Loads committed `step`. If it is gone (deleted since it was listed, as a writer's retention
// deletes a step a reader listed), forgets it, sets `*gone` and throws the load's error; if it is
// damaged, sets it aside (recorded in the core) and throws the error.
checkpoint load_committed(manager_state& state, std::int64_t step, const load_options& options, bool* gone = nullptr) {
  try {
    checkpoint t = state.load_step(step, options);
    state.core.mark_intact(step);
    return detail::chosen(t, options);
  } catch (const std::exception& e) {
    if (state.gone(step)) {
      state.core.forget(step);
      if (gone != nullptr) *gone = true;
    } else if (state.damaged_by(e)) {
      static_cast<void>(state.set_aside(step, e.what()));
    }
    throw;
  }
}

}  // namespace

std::vector<step_status> checkpoint_manager::remove_damaged() {
  if (state_->core.options().read_only)
    throw std::invalid_argument(state_->core.message("remove_damaged: the folder '" + state_->core.folder().string() +
                                                     "' was opened read-only"));
  return state_->remove_damaged();
}

checkpoint checkpoint_manager::load(std::int64_t step, const load_options& opts) {
  state_->settle();
  state_->core.require(step);
  return load_committed(*state_, step, opts);
}

checkpoint_manager::latest checkpoint_manager::load_latest(const load_options& opts) {
  state_->settle();
  latest out;
  while (const std::optional<std::int64_t> step = latest_step()) {
    bool gone = false;
    try {
      out.data = load_committed(*state_, *step, opts, &gone);
      out.step = *step;
      out.sources = state_->last_sources;
      break;
    } catch (const std::exception& e) {
      if (gone) continue;  // deleted since it was listed: no longer a step, and not damage
      if (!state_->damaged_by(e)) throw;
      out.skipped.push_back(state_->core.damaged().back());
    }
  }
  return out;
}

std::string_view to_string(checkpoint_manager::tier t) noexcept {
  switch (t) {
    case checkpoint_manager::tier::local: return "local";
    case checkpoint_manager::tier::partner: return "partner";
    case checkpoint_manager::tier::folder: break;
  }
  return "folder";
}

}  // namespace ckpt

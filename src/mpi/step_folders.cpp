// ckpt::mpi::save, ckpt::mpi::load and the committed steps of step folders (the API is
// ckpt/mpi.hpp), on the helpers of src/mpi/ that every collective function shares.
#include <ckpt/mpi.hpp>

#include "../hf_index.hpp"
#include "../manager_core.hpp"
#include "../atomic_file.hpp"
#include "../file.hpp"
#include "../posix_file.hpp"
#include "../safetensors.hpp"
#include "../sharded.hpp"
#include "common.hpp"
#include "holding.hpp"
#include "step.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace ckpt::mpi {
namespace {

using detail::describe_entry;
using detail::index_file_name;
using detail::shard_name;
using detail::step_folder;
using detail::step_prefix;



// After a failed save: each rank removes its shard, then rank 0 the step folder if nothing else
// is left in it (a folder the failed save created; debris of other jobs stays). Every rank
// returns once all that is done, so that the folder is as the caller will find it.
void undo(MPI_Comm comm, const detail::step_plan& plan) {
  std::error_code ignored;
  if (!plan.shard.empty()) std::filesystem::remove(plan.dir / plan.shard, ignored);
  MPI_Barrier(comm);
  if (detail::rank_of(comm) == 0) std::filesystem::remove(plan.dir, ignored);
  MPI_Barrier(comm);
}

}  // namespace

namespace detail {

std::filesystem::path step_folder(const std::filesystem::path& folder, std::int64_t step) {
  if (step < 0) throw std::invalid_argument("ckpt: mpi: negative step " + std::to_string(step));
  return folder / ckpt::detail::step_name(step_prefix, step);
}

std::vector<holding> gather_holdings(MPI_Comm comm, step_plan& plan, const std::filesystem::path& folder,
                                     std::int64_t step, const metadata_map& metadata, std::string_view function,
                                     const std::function<void(std::vector<holding::entry>&)>& describe_mine) {
  const int size = size_of(comm);
  plan.folder = folder;
  plan.step = step;
  plan.operation = std::string(function) + " of step " + std::to_string(step);

  // Who holds what. A rank that cannot describe its part still takes part in the exchange.
  holding mine;
  std::exception_ptr local_error;
  try {
    mine.step = step;
    describe_mine(mine.entries);
    if (rank_of(comm) == 0) {
      mine.metadata = metadata;
      if (step >= 0) {
        std::error_code ec;
        mine.committed = std::filesystem::exists(step_folder(folder, step) / index_file_name, ec);
      }
    }
  } catch (...) {
    local_error = std::current_exception();
    mine = holding{};
    mine.error = message_of(local_error);
  }
  std::vector<holding> all = exchange(comm, mine);
  for (int r = 0; r < size; ++r)
    if (!all[static_cast<std::size_t>(r)].error.empty())
      throw_failure(comm, {r, all[static_cast<std::size_t>(r)].error}, local_error, folder, plan.operation);

  // The plan, computed identically on every rank from the same data, so that a refusal is
  // thrown everywhere without another message.
  for (int r = 1; r < size; ++r)
    if (all[static_cast<std::size_t>(r)].step != all[0].step)
      throw std::invalid_argument("ckpt: mpi::" + std::string(function) + ": the ranks disagree on the step: rank 0 saves step " +
                                  std::to_string(all[0].step) + ", rank " + std::to_string(r) + " step " +
                                  std::to_string(all[static_cast<std::size_t>(r)].step));
  plan.dir = step_folder(folder, step);  // throws on every rank alike
  if (all[0].committed)
    throw std::invalid_argument("ckpt: mpi::" + std::string(function) + ": step " + std::to_string(step) +
                                " is already committed in '" + folder.string() + "' ('" +
                                (plan.dir / index_file_name).string() + "' exists); a committed step is never rewritten");
  plan.metadata = all[0].metadata;
  plan.metadata.insert_or_assign("step", std::to_string(step));
  return all;
}

step_plan plan_step(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                    std::span<const section> sections, const metadata_map& metadata, std::string_view function) {
  const int size = size_of(comm);
  step_plan plan;
  const std::vector<holding> all =
      gather_holdings(comm, plan, folder, step, metadata, function, [&](std::vector<holding::entry>& entries) {
        for (const auto* e : ckpt::detail::ordered_entries(sections, "mpi::" + std::string(function)))
          entries.push_back({e->name, e->dtype, e->shape});
      });
  struct placement {
    int writer;
    const holding::entry* first;
  };
  std::map<std::string, placement, std::less<>> placements;
  std::vector<std::size_t> written_by(static_cast<std::size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    for (const holding::entry& x : all[static_cast<std::size_t>(r)].entries) {
      const auto [it, inserted] = placements.try_emplace(x.name, placement{r, &x});
      if (inserted) {
        ++written_by[static_cast<std::size_t>(r)];
        plan.total_size += ckpt::detail::nbytes_of(x.type, ckpt::detail::numel_of(x.shape));
      } else if (it->second.first->type != x.type || it->second.first->shape != x.shape) {
        throw std::invalid_argument("ckpt: mpi::" + plan.operation + ": the entry '" + x.name + "' is " +
                                    describe_entry(it->second.first->type, it->second.first->shape) + " on rank " +
                                    std::to_string(it->second.writer) + " but " + describe_entry(x.type, x.shape) +
                                    " on rank " + std::to_string(r));
      }
    }
  }
  // Shard k goes to the k-th rank that writes anything, so that the names run 1..K without gaps.
  plan.shards.resize(static_cast<std::size_t>(size));
  const auto writers = static_cast<std::size_t>(std::ranges::count_if(written_by, [](std::size_t n) { return n > 0; }));
  for (std::size_t r = 0, k = 0; r < written_by.size(); ++r)
    if (written_by[r] > 0) plan.shards[r] = shard_name(++k, writers);
  const int rank = rank_of(comm);
  plan.shard = plan.shards[static_cast<std::size_t>(rank)];
  plan.weight_map.reserve(placements.size());  // `placements` is sorted by name
  for (const auto& [name, where] : placements) {
    plan.weight_map.emplace_back(name, plan.shards[static_cast<std::size_t>(where.writer)]);
    if (where.writer == rank) plan.mine.insert(name);
  }
  return plan;
}

void write_shard(const step_plan& plan, std::span<const section> sections, const save_options& options) {
  std::error_code ec;
  std::filesystem::create_directories(plan.dir, ec);
  if (ec) throw io_error(plan.dir, "create the folder", ec);
  if (plan.shard.empty()) return;
  std::vector<ckpt::detail::entry_source> entries;
  entries.reserve(plan.mine.size());
  for (const auto* e : ckpt::detail::ordered_entries(sections, "mpi::" + plan.operation))
    if (plan.mine.contains(e->name)) entries.push_back(*e);
  ckpt::detail::write_file(plan.dir / plan.shard, entries, plan.metadata, options);
}

void commit_step(MPI_Comm comm, const step_plan& plan, const std::exception_ptr& local_error) {
  std::exception_ptr error = local_error;
  // The one agreement that every shard is durable (the writer returned after its fsyncs).
  if (const std::optional<failure> f = agree(comm, error)) {
    undo(comm, plan);
    throw_failure(comm, *f, error, plan.folder, plan.operation);
  }
  // The commit: rank 0 writes the index, then tidies what an earlier, crashed attempt at this
  // step may have left (files the index does not name); one broadcast tells every rank.
  if (rank_of(comm) == 0) {
    try {
      // If anything fails, the index is absent afterwards (even when only the folder's fsync
      // failed after the rename), so that the ranks can remove their shards without leaving a
      // committed step that names missing files.
      ckpt::detail::write_atomically(plan.dir / index_file_name, ckpt::detail::index_text(plan.total_size, plan.weight_map),
                                     ckpt::detail::on_folder_sync_failure::remove_new_file);
      std::set<std::string, std::less<>> keep(plan.shards.begin(), plan.shards.end());
      keep.emplace(index_file_name);
      std::error_code ec;
      for (std::filesystem::directory_iterator it(plan.dir, ec), end; !ec && it != end; it.increment(ec))
        if (!keep.contains(it->path().filename().string())) {
          std::error_code ignored;
          std::filesystem::remove_all(it->path(), ignored);
        }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (const std::optional<failure> f = agree(comm, error)) {
    undo(comm, plan);
    throw_failure(comm, *f, error, plan.folder, plan.operation);
  }
}

std::vector<std::int64_t> committed_steps(const std::filesystem::path& folder) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  if (!std::filesystem::exists(folder, ec)) return steps;
  std::filesystem::directory_iterator it(folder, ec);
  if (ec) throw io_error(folder, "list", ec);
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::optional<std::int64_t> step = ckpt::detail::step_in_name(it->path().filename().string(), step_prefix);
    std::error_code ignored;
    if (step && std::filesystem::is_regular_file(it->path() / index_file_name, ignored)) steps.push_back(*step);
  }
  if (ec) throw io_error(folder, "list", ec);
  std::ranges::sort(steps);
  return steps;
}

}  // namespace detail

std::filesystem::path save(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                           std::span<const section> local, const metadata_map& metadata, const save_options& options) {
  // Rank 0's metadata count.
  const detail::step_plan plan = detail::plan_step(comm, folder, step, local, metadata, "save");
  std::exception_ptr local_error;
  try {
    detail::write_shard(plan, local, options);
  } catch (...) {
    local_error = std::current_exception();
  }
  detail::commit_step(comm, plan, local_error);
  return plan.dir;
}

checkpoint load(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step, const load_options& options) {
  const int rank = detail::rank_of(comm);
  const int size = detail::size_of(comm);
  checkpoint result;
  std::exception_ptr local_error;
  try {
    const std::filesystem::path index = step_folder(folder, step) / index_file_name;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(index, ec))
      throw std::invalid_argument("ckpt: mpi::load: step " + std::to_string(step) + " is not committed in '" +
                                  folder.string() + "' (there is no '" + index.string() + "')");
    // Every rank maps every shard (headers only), through the one reader of sharded checkpoints.
    result = ckpt::detail::load_sharded(index, {.verify_digest = false});
    if (options.verify_digest) {
      // Each shard's digest once in all: shard k (in name order) by rank k mod size.
      std::size_t k = 0;
      for (const auto& [shard, names] : ckpt::detail::read_weight_map(index))
        if (k++ % static_cast<std::size_t>(size) == static_cast<std::size_t>(rank))
          static_cast<void>(ckpt::load(index.parent_path() / shard, {.verify_digest = true}));
    }
  } catch (...) {
    local_error = std::current_exception();
  }
  detail::settle(comm, local_error, folder, "load of step " + std::to_string(step));
  return result;
}

}  // namespace ckpt::mpi

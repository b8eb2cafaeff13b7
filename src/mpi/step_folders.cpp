// ckpt::mpi::save, ckpt::mpi::load and the committed steps of step folders (the API is
// ckpt/mpi.hpp), on the helpers of src/mpi/ that every collective function shares.
#include <ckpt/mpi.hpp>

#include "format/hf_index.hpp"
#include "format/reader.hpp"
#include "format/safetensors.hpp"
#include "format/sharded.hpp"
#include "format/writer.hpp"
#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/posix_file.hpp"
#include "run/layout.hpp"
#include "common.hpp"
#include "holding.hpp"
#include "step.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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



// After a failed save: each rank removes its shard, then rank 0 the step folder if nothing else
// is left in it (a folder the failed save created; debris of other jobs stays). Every rank
// returns once all that is done, so that the folder is as the caller will find it. Nothing is
// followed through a link: a step "folder" that is a link was never written into.
void undo(MPI_Comm comm, const detail::step_plan& plan) {
  if (!plan.shard.empty()) {
    try {
      static_cast<void>(plan.run.subfolder(plan.dir_name).remove(plan.shard));
    } catch (const error&) {
    }
  }
  MPI_Barrier(comm);
  if (detail::rank_of(comm) == 0) static_cast<void>(::unlinkat(plan.run.fd(), plan.dir_name.c_str(), AT_REMOVEDIR));
  MPI_Barrier(comm);
}

}  // namespace

namespace detail {

std::string step_folder_name(std::int64_t step) {
  if (step < 0) throw std::invalid_argument("ckpt: mpi: negative step " + std::to_string(step));
  return ckpt::detail::layout::step_folder(step);
}

std::filesystem::path step_folder(const std::filesystem::path& folder, std::int64_t step) {
  return folder / step_folder_name(step);
}

std::vector<holding> gather_holdings(MPI_Comm comm, step_plan& plan, const std::filesystem::path& folder,
                                     const ckpt::detail::folder_handle* held, std::int64_t step,
                                     std::string_view function, const std::function<void(holding& mine)>& describe_mine) {
  const int size = size_of(comm);
  plan.folder = folder;
  plan.step = step;
  plan.operation = std::string(function) + " of step " + std::to_string(step);

  // Who holds what. A rank that cannot describe its part still takes part in the exchange.
  holding mine;
  std::exception_ptr local_error;
  try {
    mine.step = step;
    describe_mine(mine);
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
  plan.dir_name = step_folder_name(step);  // throws on every rank alike
  plan.dir = folder / plan.dir_name;
  // The folder, once the step is agreed: held already, or opened by each rank (created if need be).
  if (held != nullptr) {
    plan.run = *held;
  } else {
    std::exception_ptr open_error;
    try {
      plan.run = ckpt::detail::folder_handle::open(folder, /*create=*/true);
    } catch (...) {
      open_error = std::current_exception();
    }
    settle(comm, open_error, folder, plan.operation);
  }
  int committed = rank_of(comm) == 0 && is_committed(plan.run, plan.dir_name) ? 1 : 0;
  MPI_Bcast(&committed, 1, MPI_INT, 0, comm);
  if (committed != 0)
    throw std::invalid_argument("ckpt: mpi::" + std::string(function) + ": step " + std::to_string(step) +
                                " is already committed in '" + folder.string() + "' ('" +
                                (plan.dir / index_file_name).string() + "' exists); a committed step is never rewritten");
  plan.metadata = all[0].metadata;
  plan.metadata.insert_or_assign("step", std::to_string(step));
  return all;
}

step_plan plan_step(MPI_Comm comm, const std::filesystem::path& folder, const ckpt::detail::folder_handle* held,
                    std::int64_t step, std::span<const section> sections, const metadata_map& metadata,
                    std::string_view function) {
  const int size = size_of(comm);
  step_plan plan;
  const std::vector<holding> all =
      gather_holdings(comm, plan, folder, held, step, function, [&](holding& mine) {
        const std::string caller = "mpi::" + std::string(function);
        for (const auto* e : ckpt::detail::ordered_entries(sections, caller, ckpt::detail::slices_are::taken)) {
          if (e->first < 0) mine.entries.push_back({e->name, e->dtype, e->shape});
          else mine.entries.push_back({e->name, e->dtype, e->global_shape, e->first, ckpt::detail::numel_of(e->shape)});
        }
        // Every rank checks the metadata of its checkpoint sections; rank 0's are the step's.
        metadata_map given = ckpt::detail::merged_metadata(sections, metadata, caller);
        if (rank_of(comm) == 0) mine.metadata = std::move(given);
      });
  // A step with slices is one shard, of whole tensors, that the ranks write together.
  if (std::ranges::any_of(all, [](const holding& h) {
        return std::ranges::any_of(h.entries, [](const holding::entry& x) { return x.count >= 0; });
      })) {
    lay_out_slices(plan, all, rank_of(comm));
    return plan;
  }
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

ckpt::detail::folder_handle open_step_folder(const step_plan& plan) {
  return plan.run.subfolder(plan.dir_name, /*create=*/true);
}

void write_shard(const step_plan& plan, std::span<const section> sections, const save_options& options,
                 ckpt::detail::write_path path) {
  const ckpt::detail::folder_handle dir = open_step_folder(plan);
  if (plan.shard.empty()) return;
  std::vector<const ckpt::detail::entry_source*> entries = ckpt::detail::ordered_entries(sections, "mpi::" + plan.operation);
  std::erase_if(entries, [&plan](const ckpt::detail::entry_source* e) { return !plan.mine.contains(e->name); });
  ckpt::detail::write_file({dir, plan.shard}, entries, plan.metadata, options, path);
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
      const ckpt::detail::folder_handle dir = open_step_folder(plan);
      // If anything fails, the index is absent afterwards (even when only the folder's fsync
      // failed after the rename), so that the ranks can remove their shards without leaving a
      // committed step that names missing files.
      ckpt::detail::write_atomically({dir, std::string(index_file_name)},
                                     ckpt::detail::index_text(plan.total_size, plan.weight_map),
                                     ckpt::detail::on_folder_sync_failure::remove_new_file);
      std::set<std::string, std::less<>> keep(plan.shards.begin(), plan.shards.end());
      keep.emplace(index_file_name);
      try {
        for (const std::string& name : dir.names())
          if (!keep.contains(name)) static_cast<void>(dir.remove(name));
      } catch (const ckpt::error&) {  // debris left is only wasted space: the index names what counts
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

bool is_damage(const std::exception_ptr& e) noexcept {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return ckpt::detail::is_damage(x);
  } catch (...) {
    return false;
  }
}

bool is_committed(const ckpt::detail::folder_handle& run, const std::string& name) {
  struct stat info {};
  return ::fstatat(run.fd(), (name + "/" + std::string(index_file_name)).c_str(), &info, 0) == 0 && S_ISREG(info.st_mode);
}

std::vector<std::int64_t> committed_steps(const ckpt::detail::folder_handle& run) {
  std::vector<std::int64_t> steps;
  for (const std::string& name : run.names())
    if (const std::optional<std::int64_t> step = ckpt::detail::layout::step_of_folder(name); step && is_committed(run, name))
      steps.push_back(*step);
  std::ranges::sort(steps);
  return steps;
}

std::vector<std::int64_t> committed_steps(const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::exists(folder, ec)) return {};
  return committed_steps(ckpt::detail::folder_handle::open(folder));
}

checkpoint load_step(MPI_Comm comm, const ckpt::detail::folder_handle& run, std::int64_t step, const load_options& options,
                     bool* damaged, std::vector<checkpoint_manager::source>* sources) {
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  checkpoint result;
  std::exception_ptr local_error;
  const std::string operation = "load of step " + std::to_string(step);
  // Every rank maps every shard (headers only); the shards' digests are verified once in all,
  // shard k (in name order) by rank k mod size, and the hashes shared, so that every rank's
  // copies out of the step are checked against them.
  std::filesystem::path index;
  std::optional<ckpt::detail::folder_handle> dir;
  std::map<std::string, std::vector<std::string>, std::less<>> by_shard;
  std::vector<std::vector<std::uint64_t>> hashes;
  try {
    const std::string name = step_folder_name(step);
    index = run.path_of(name) / index_file_name;
    if (!is_committed(run, name))
      throw std::invalid_argument("ckpt: mpi::load: step " + std::to_string(step) + " is not committed in '" +
                                  run.path().string() + "' (there is no '" + index.string() + "')");
    dir = run.subfolder_to_read(name);  // a forked run's step may be a link to another run's
    struct stat info {};
    const ckpt::detail::file_descriptor fd = dir->open_to_read(index_file_name, info);
    by_shard = ckpt::detail::read_weight_map(fd.get(), index);
    hashes.resize(by_shard.size());
    if (ckpt::detail::checks_digest(options)) {
      std::size_t k = 0;
      for (const auto& [shard, names] : by_shard) {
        if (k % static_cast<std::size_t>(size) == static_cast<std::size_t>(rank))
          hashes[k] = ckpt::detail::verify_file({*dir, shard}, {.verify_digest = true});
        ++k;
      }
    }
  } catch (...) {
    local_error = std::current_exception();
  }
  const auto settle_load = [&] {
    if (const std::optional<failure> f = agree(comm, local_error, is_damage(local_error))) {
      if (damaged != nullptr) *damaged = f->preferred;
      throw_failure(comm, *f, local_error, run.path(), operation);
    }
  };
  settle_load();
  // Each shard's hashes from the rank that verified it (none: not verified, or no digest).
  for (std::size_t k = 0; options.verify_digest && k < hashes.size(); ++k) {
    std::string bytes = encode(hashes[k]);
    broadcast(comm, bytes, static_cast<int>(k % static_cast<std::size_t>(size)));
    hashes[k] = decode<std::vector<std::uint64_t>>(bytes);
  }
  try {
    std::map<std::string, std::size_t, std::less<>> number;
    for (const auto& [shard, names] : by_shard) number.emplace(shard, number.size());
    result = ckpt::detail::assemble_shards(index, by_shard, [&](const std::string& shard) {
      const std::vector<std::uint64_t>& known = hashes[number.at(shard)];
      return ckpt::detail::load_file({*dir, shard}, {.verify_digest = !known.empty()}, known);
    });
  } catch (...) {
    local_error = std::current_exception();
  }
  settle_load();
  if (sources != nullptr) {
    sources->clear();
    for (const auto& [shard, names] : by_shard) sources->push_back({shard, checkpoint_manager::tier::folder, 0});
  }
  return result;
}

}  // namespace detail

std::filesystem::path save(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                           std::span<const section> local, const metadata_map& metadata, const save_options& options) {
  // Each rank opens the folder once, in the plan; the step is written relative to it. Rank 0's
  // metadata count.
  const detail::step_plan plan = detail::plan_step(comm, folder, nullptr, step, local, metadata, "save");
  std::exception_ptr local_error;
  if (!plan.sliced.empty()) {
    detail::write_sliced(comm, plan, local, options, local_error);
  } else {
    try {
      detail::write_shard(plan, local, options);
    } catch (...) {
      local_error = std::current_exception();
    }
  }
  detail::commit_step(comm, plan, local_error);
  return plan.dir;
}

checkpoint load(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step, const load_options& options) {
  std::exception_ptr open_error;
  ckpt::detail::folder_handle run;
  try {
    run = ckpt::detail::folder_handle::open(folder);
  } catch (...) {
    open_error = std::current_exception();
  }
  detail::settle(comm, open_error, folder, "load of step " + std::to_string(step));
  return ckpt::detail::chosen(detail::load_step(comm, run, step, options, nullptr), options);
}

}  // namespace ckpt::mpi

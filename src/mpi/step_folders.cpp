// ckpt::mpi::save, ckpt::mpi::load and the committed steps of step folders (the API is
// ckpt/mpi.hpp), on the helpers of src/mpi/ that every collective function shares.
#include <ckpt/mpi.hpp>

#include "format/hf_index.hpp"
#include "format/reader.hpp"
#include "format/safetensors.hpp"
#include "format/sharded.hpp"
#include "format/writer.hpp"
#include "io/folder.hpp"
#include "io/posix_file.hpp"
#include "run/layout.hpp"
#include "run/store.hpp"
#include "common.hpp"
#include "holding.hpp"
#include "step.hpp"

#include <sys/stat.h>

#include <algorithm>
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
using detail::step_folder;



// After a failed save: each rank removes its shard, then rank 0 the step folder if nothing else
// is left in it (a folder the failed save created; debris of other jobs stays). Every rank
// returns once all that is done, so that the folder is as the caller will find it. Nothing is
// followed through a link: a step "folder" that is a link was never written into.
void undo(MPI_Comm comm, const detail::step_plan& plan) {
  if (!plan.shard.empty()) {
    try {
      static_cast<void>(plan.run->remove(plan.name_of(plan.shard)));
    } catch (const error&) {
    }
  }
  MPI_Barrier(comm);
  if (detail::rank_of(comm) == 0) {
    try {
      if (plan.run->find(plan.dir_name) == ckpt::detail::store::kind::folder && plan.run->list(plan.dir_name).empty())
        static_cast<void>(plan.run->remove(plan.dir_name));
    } catch (const error&) {
    }
  }
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
                                     const run_store& held, std::int64_t step,
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
  // The run, once the step is agreed: held already, or opened by each rank (created if need be).
  std::exception_ptr open_error;
  int committed = 0;
  try {
    plan.run = held ? held : run_store(ckpt::detail::open_store(folder, /*create=*/true));
    committed = rank_of(comm) == 0 && ckpt::detail::layout::committed_step_folder(*plan.run, plan.dir_name) ? 1 : 0;
  } catch (...) {
    open_error = std::current_exception();
  }
  settle(comm, open_error, folder, plan.operation);
  MPI_Bcast(&committed, 1, MPI_INT, 0, comm);
  if (committed != 0)
    throw std::invalid_argument("ckpt: mpi::" + std::string(function) + ": step " + std::to_string(step) +
                                " is already committed in '" + folder.string() + "' ('" +
                                (plan.dir / index_file_name).string() + "' exists); a committed step is never rewritten");
  plan.metadata = all[0].metadata;
  plan.metadata.insert_or_assign("step", std::to_string(step));
  return all;
}

step_plan plan_step(MPI_Comm comm, const std::filesystem::path& folder, const run_store& held, std::int64_t step, std::span<const section> sections, const metadata_map& metadata,
                    std::string_view function) {
  const int size = size_of(comm);
  step_plan plan;
  const std::vector<holding> all =
      gather_holdings(comm, plan, folder, held, step, function, [&](holding& mine) {
        const std::string caller = "mpi::" + std::string(function);
        for (const auto* e : ckpt::detail::ordered_entries(sections, caller, ckpt::detail::slices_are::taken))
          mine.entries.push_back(held_entry(*e));
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
    const ckpt::detail::entry_head* first;
  };
  std::map<std::string, placement, std::less<>> placements;
  std::vector<std::size_t> written_by(static_cast<std::size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    for (const holding::entry& given : all[static_cast<std::size_t>(r)].entries) {
      const ckpt::detail::entry_head& x = given.head;
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
    if (written_by[r] > 0) plan.shards[r] = ckpt::detail::layout::step_shard(++k, writers);
  const int rank = rank_of(comm);
  plan.shard = plan.shards[static_cast<std::size_t>(rank)];
  plan.weight_map.reserve(placements.size());  // `placements` is sorted by name
  for (const auto& [name, where] : placements) {
    plan.weight_map.emplace_back(name, plan.shards[static_cast<std::size_t>(where.writer)]);
    if (where.writer == rank) plan.mine.insert(name);
  }
  return plan;
}

void write_shard(const step_plan& plan, std::span<const section> sections, const save_options& options,
                 ckpt::detail::write_path path) {
  if (plan.shard.empty()) return;
  std::vector<const ckpt::detail::entry_source*> entries = ckpt::detail::ordered_entries(sections, "mpi::" + plan.operation);
  std::erase_if(entries, [&plan](const ckpt::detail::entry_source* e) { return !plan.mine.contains(e->name); });
  // A leftover of a crashed attempt at this step is replaced: the step is not committed.
  const std::unique_ptr<ckpt::detail::store::file> file =
      plan.run->create(plan.name_of(plan.shard), ckpt::detail::store::existing::replaced, path);
  ckpt::detail::write_file(file->sink(), entries, plan.metadata, options, path);
  static_cast<void>(file->commit());
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
  // If anything fails, the index is absent afterwards (store::write), so that the ranks can
  // remove their shards without leaving a committed step that names missing files.
  int taken = 0;  // another writer committed the step: its shards are not ours to remove
  if (rank_of(comm) == 0) {
    try {
      const std::string index = plan.name_of(index_file_name);
      if (!plan.run->write(index, ckpt::detail::index_text(plan.total_size, plan.weight_map),
                           ckpt::detail::store::existing::kept)) {
        taken = 1;
        throw io_error(plan.run->path_of(index),
                       "commit the step (another writer of the run committed it meanwhile: a committed step is "
                       "never rewritten) at",
                       std::make_error_code(std::errc::file_exists));
      }
      std::set<std::string, std::less<>> keep(plan.shards.begin(), plan.shards.end());
      keep.emplace(index_file_name);
      try {
        for (const ckpt::detail::store::entry& e : plan.run->list(plan.dir_name))
          if (!keep.contains(e.name)) static_cast<void>(plan.run->remove(plan.name_of(e.name)));
      } catch (const ckpt::error&) {  // debris left is only wasted space: the index names what counts
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (const std::optional<failure> f = agree(comm, error)) {
    MPI_Bcast(&taken, 1, MPI_INT, 0, comm);
    if (taken == 0) undo(comm, plan);
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

std::vector<std::int64_t> committed_steps(const ckpt::detail::store& run) {
  std::vector<std::int64_t> steps;
  for (const ckpt::detail::layout::item& x : ckpt::detail::layout::describe(run))
    if (x.kind == ckpt::detail::layout::what::step_folder) steps.push_back(*x.step);
  std::ranges::sort(steps);
  return steps;
}

std::optional<std::map<std::string, std::vector<std::string>, std::less<>>> read_step_index(
    const ckpt::detail::store& run, const std::string& dir_name) {
  if (!ckpt::detail::layout::committed_step_folder(run, dir_name)) return std::nullopt;
  const std::string index = dir_name + "/" + std::string(index_file_name);
  if (const ckpt::detail::folder_handle* folder = run.local()) {
    struct stat info {};
    const ckpt::detail::folder_handle dir = folder->subfolder_to_read(dir_name);
    const ckpt::detail::file_descriptor fd = dir.open_to_read(index_file_name, info);
    return ckpt::detail::read_weight_map(fd.get(), run.path_of(index));
  }
  const std::optional<std::string> text = run.read(index, ckpt::detail::max_header_size);
  if (!text) return std::nullopt;
  return ckpt::detail::parse_weight_map(*text, run.path_of(index));
}

fetched_shard fetch_shard(const ckpt::detail::store& run, const std::string& name, const load_options& options) {
  fetched_shard out;
  out.bytes = run.fetch(name, out.size);
  out.parsed = ckpt::detail::parse_owned(out.bytes, out.size, run.path_of(name), {.verify_digest = options.verify_digest});
  return out;
}

checkpoint share_shard(MPI_Comm comm, fetched_shard& mine, int root, const std::filesystem::path& shown,
                       std::exception_ptr& error) {
  std::uint64_t size = mine.size;
  MPI_Bcast(&size, 1, MPI_UINT64_T, root, comm);
  const bool here = rank_of(comm) == root;
  std::exception_ptr failed;
  if (!here) {
    try {
      mine.bytes = std::make_shared_for_overwrite<std::byte[]>(static_cast<std::size_t>(std::max<std::uint64_t>(size, 1)));
    } catch (...) {
      failed = std::current_exception();
    }
  }
  // Every rank has room for the bytes, or none receives them.
  if (agree(comm, failed)) {
    if (!error) error = failed ? failed : std::make_exception_ptr(std::runtime_error("ckpt: mpi: another rank had no room for '" + shown.string() + "'"));
    return {};
  }
  // In pieces that an int counts.
  constexpr std::uint64_t piece = std::uint64_t{1} << 30;
  for (std::uint64_t at = 0; at < size; at += piece)
    MPI_Bcast(mine.bytes.get() + at, static_cast<int>(std::min(piece, size - at)), MPI_BYTE, root, comm);
  if (here) return mine.parsed;
  try {
    return ckpt::detail::parse_owned(mine.bytes, static_cast<std::size_t>(size), shown, {.verify_digest = false});
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  return {};
}

checkpoint load_step(MPI_Comm comm, const ckpt::detail::store& run, std::int64_t step, const load_options& options,
                     bool* damaged, std::vector<checkpoint_manager::source>* sources) {
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  checkpoint result;
  std::exception_ptr local_error;
  const std::string operation = "load of step " + std::to_string(step);
  const ckpt::detail::folder_handle* const folder = run.local();
  // Every rank reads the index; in a folder, every rank maps every shard (headers only), and the
  // shards' digests are verified once in all, shard k (in name order) by rank k mod size, and the
  // hashes shared, so that every rank's copies out of the step are checked against them. In a
  // bucket, shard k is fetched (and verified) by rank k mod size, which sends it to the others.
  std::string name;
  std::filesystem::path index;
  std::optional<ckpt::detail::folder_handle> dir;
  std::map<std::string, std::vector<std::string>, std::less<>> by_shard;
  std::vector<std::vector<std::uint64_t>> hashes;
  std::vector<fetched_shard> fetched;
  const auto is_mine = [&](std::size_t k) { return k % static_cast<std::size_t>(size) == static_cast<std::size_t>(rank); };
  try {
    name = step_folder_name(step);
    index = run.path_of(name) / index_file_name;
    auto read = read_step_index(run, name);
    if (!read)
      throw std::invalid_argument("ckpt: mpi::load: step " + std::to_string(step) + " is not committed in '" +
                                  run.path_of("").string() + "' (there is no '" + index.string() + "')");
    by_shard = std::move(*read);
    hashes.resize(by_shard.size());
    fetched.resize(by_shard.size());
    if (folder != nullptr) dir = folder->subfolder_to_read(name);  // a forked run's step may be a link to another run's
    std::size_t k = 0;
    for (const auto& [shard, names] : by_shard) {
      if (is_mine(k)) {
        if (folder == nullptr) fetched[k] = fetch_shard(run, name + "/" + shard, options);
        else if (ckpt::detail::checks_digest(options))
          hashes[k] = ckpt::detail::verify_file({*dir, shard}, {.verify_digest = true});
      }
      ++k;
    }
  } catch (...) {
    local_error = std::current_exception();
  }
  const auto settle_load = [&] {
    if (const std::optional<failure> f = agree(comm, local_error, is_damage(local_error))) {
      if (damaged != nullptr) *damaged = f->preferred;
      throw_failure(comm, *f, local_error, run.path_of(""), operation);
    }
  };
  settle_load();
  std::map<std::string, std::size_t, std::less<>> number;
  for (const auto& [shard, names] : by_shard) number.emplace(shard, number.size());
  if (folder == nullptr) {
    // Each shard from the rank that fetched it.
    std::vector<checkpoint> shards;
    for (const auto& [shard, k] : number)
      shards.push_back(share_shard(comm, fetched[k], static_cast<int>(k % static_cast<std::size_t>(size)),
                                   run.path_of(name + "/" + shard), local_error));
    fetched.clear();
    try {
      if (!local_error)
        result = ckpt::detail::assemble_shards(index, by_shard, [&](const std::string& shard) { return shards[number.at(shard)]; });
    } catch (...) {
      local_error = std::current_exception();
    }
  } else {
    // Each shard's hashes from the rank that verified it (none: not verified, or no digest).
    for (std::size_t k = 0; options.verify_digest && k < hashes.size(); ++k) {
      std::string bytes = encode(hashes[k]);
      broadcast(comm, bytes, static_cast<int>(k % static_cast<std::size_t>(size)));
      hashes[k] = decode<std::vector<std::uint64_t>>(bytes);
    }
    try {
      result = ckpt::detail::assemble_shards(index, by_shard, [&](const std::string& shard) {
        const std::vector<std::uint64_t>& known = hashes[number.at(shard)];
        return ckpt::detail::load_file({*dir, shard}, {.verify_digest = !known.empty()}, known);
      });
    } catch (...) {
      local_error = std::current_exception();
    }
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
  const detail::step_plan plan = detail::plan_step(comm, folder, {}, step, local, metadata, "save");
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
  std::unique_ptr<ckpt::detail::store> run;
  try {
    run = ckpt::detail::open_store(folder, /*create=*/false);
  } catch (...) {
    open_error = std::current_exception();
  }
  detail::settle(comm, open_error, folder, "load of step " + std::to_string(step));
  return ckpt::detail::chosen(detail::load_step(comm, *run, step, options, nullptr), options);
}

}  // namespace ckpt::mpi

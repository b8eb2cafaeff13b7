// The local tiers of ckpt::mpi::checkpoint_manager (src/mpi/tiers.hpp).
#include "tiers.hpp"

#include "format/hf_index.hpp"
#include "format/reader.hpp"
#include "format/sharded.hpp"
#include "format/writer.hpp"
#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/posix_file.hpp"
#include "io/remote_path.hpp"
#include "run/layout.hpp"
#include "run/manager_core.hpp"
#include "common.hpp"
#include "holding.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

namespace ckpt::mpi::detail {
namespace {

using ckpt::detail::file_at;
using ckpt::detail::folder_handle;
using ckpt::detail::store;
namespace layout = ckpt::detail::layout;
using source = checkpoint_manager::source;
using tier = checkpoint_manager::tier;
// Files cross between ranks this many bytes at a time: a buffer of it per file in flight.
constexpr std::uint64_t chunk_bytes = std::uint64_t{16} << 20;
constexpr int size_tag = 7301;
constexpr int chunk_tag = 7302;
// The size a sender announces for a file it could not open: nothing follows.
constexpr std::uint64_t no_file = ~std::uint64_t{0};

void record(std::exception_ptr& error) noexcept {
  if (!error) error = std::current_exception();
}

// A file this rank sends to `to` (read from `from` here), or receives from `from_rank` (written
// atomically to `to_file` here).
struct outgoing {
  int to;
  file_at from;
};
struct incoming {
  int from_rank;
  file_at to_file;
};

// Sends and receives whole files, every pair at once, a chunk at a time. For each pair of ranks,
// the sender's `out` and the receiver's `in` list their files between them in the same order.
// A failure on either side is recorded in `error`; the transfer goes on (a sender that cannot read
// sends what it has, a receiver that cannot write drops the bytes), so that no rank waits forever.
void move_files(MPI_Comm comm, const std::vector<outgoing>& out, const std::vector<incoming>& in,
                std::exception_ptr& error) {
  std::vector<ckpt::detail::file_descriptor> readers;
  std::vector<std::uint64_t> out_sizes(out.size(), no_file);
  std::vector<std::uint64_t> in_sizes(in.size(), no_file);
  std::vector<MPI_Request> requests;
  for (const incoming& x : in) {
    requests.emplace_back();
    MPI_Irecv(&in_sizes[&x - in.data()], 1, MPI_UINT64_T, x.from_rank, size_tag, comm, &requests.back());
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    try {
      struct stat info {};
      readers.push_back(out[i].from.folder.open_to_read(out[i].from.name, info));
      out_sizes[i] = static_cast<std::uint64_t>(info.st_size);
    } catch (...) {
      readers.emplace_back(-1);
      record(error);
    }
    requests.emplace_back();
    MPI_Isend(&out_sizes[i], 1, MPI_UINT64_T, out[i].to, size_tag, comm, &requests.back());
  }
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);

  std::vector<std::optional<ckpt::detail::atomic_file>> writers(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in_sizes[i] == no_file) continue;
    try {
      writers[i].emplace(in[i].to_file);
    } catch (...) {
      record(error);
    }
  }
  const auto chunks = [](std::uint64_t size) { return size == no_file ? 0 : (size + chunk_bytes - 1) / chunk_bytes; };
  const auto length = [](std::uint64_t size, std::uint64_t c) { return std::min(chunk_bytes, size - c * chunk_bytes); };
  std::uint64_t rounds = 0;
  for (const std::uint64_t n : out_sizes) rounds = std::max(rounds, chunks(n));
  for (const std::uint64_t n : in_sizes) rounds = std::max(rounds, chunks(n));
  std::vector<std::vector<std::byte>> out_buffers(out.size());
  std::vector<std::vector<std::byte>> in_buffers(in.size());
  for (std::uint64_t c = 0; c < rounds; ++c) {
    requests.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (c >= chunks(in_sizes[i])) continue;
      in_buffers[i].resize(static_cast<std::size_t>(length(in_sizes[i], c)));
      requests.emplace_back();
      MPI_Irecv(in_buffers[i].data(), static_cast<int>(in_buffers[i].size()), MPI_BYTE, in[i].from_rank, chunk_tag,
                comm, &requests.back());
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (c >= chunks(out_sizes[i])) continue;
      out_buffers[i].resize(static_cast<std::size_t>(length(out_sizes[i], c)));
      try {
        if (ckpt::detail::read_fully(readers[i].get(), out_buffers[i].data(), out_buffers[i].size(),
                                     static_cast<off_t>(c * chunk_bytes), out[i].from.path()) != out_buffers[i].size())
          throw io_error(out[i].from.path(), "read", std::make_error_code(std::errc::io_error));
      } catch (...) {
        record(error);
      }
      requests.emplace_back();
      MPI_Isend(out_buffers[i].data(), static_cast<int>(out_buffers[i].size()), MPI_BYTE, out[i].to, chunk_tag, comm,
                &requests.back());
    }
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (c >= chunks(in_sizes[i]) || !writers[i]) continue;
      try {
        writers[i]->write(std::string_view(reinterpret_cast<const char*>(in_buffers[i].data()), in_buffers[i].size()));
      } catch (...) {
        writers[i].reset();
        record(error);
      }
    }
  }
  for (std::optional<ckpt::detail::atomic_file>& w : writers) {
    if (!w) continue;
    try {
      w->commit();
    } catch (...) {
      record(error);
    }
  }
}

// What a node holds of one step: the shards in its committed step folders.
struct node_copies {
  std::int64_t step = 0;
  std::vector<std::string> own;
  std::vector<std::string> partner;
};

// The files a node keeps of a step: its shards, or, for a step of slices, the ranks' parts.
const std::vector<std::string>& files_of(const step_plan& plan) {
  return plan.sliced.empty() ? plan.shards : plan.parts;
}
const std::string& file_of(const step_plan& plan) { return plan.sliced.empty() ? plan.shard : plan.part; }

// The shard files (or parts: layout::step_part) of the committed step folder `name` of `run`;
// none if it is absent or not committed.
std::vector<std::string> shards_in(const store& run, const std::string& name) {
  if (!layout::committed_step_folder(run, name)) return {};
  std::vector<std::string> out;
  for (store::entry& file : run.list(name))
    if (layout::shard_count_of(file.name) || layout::part_count_of(file.name)) out.push_back(std::move(file.name));
  std::ranges::sort(out);
  return out;
}

// Whether `files` (of one step, from any nodes) are every shard of it, or every part.
bool every_shard(const std::set<std::string>& files) {
  const auto every = [&files](auto count_of, auto name_of) {
    for (const std::string& f : files)
      if (const std::optional<std::size_t> count = count_of(f)) {
        for (std::size_t k = 1; k <= *count; ++k)
          if (!files.contains(name_of(k, *count))) return false;
        return true;
      }
    return false;
  };
  return every(layout::shard_count_of, layout::step_shard) || every(layout::part_count_of, layout::step_part);
}

// The step folder `name` of a node's store, to read (a link followed) or, with `create`, to write
// into (made if need be, never through a link).
folder_handle step_dir(const run_store& run, const std::string& name, bool create = false) {
  return create ? run->local()->subfolder(name, true) : run->local()->subfolder(name);
}

// A copy of a shard as one rank checked it: on a node's own or partner folder, or the shared one.
struct copy_check {
  int node = -1;  // -1: the shared folder
  tier from = tier::folder;
  std::string shard;
  bool intact = false;
  std::string reason;                 // why not
  std::vector<std::uint64_t> hashes;  // verify_file's
};

}  // namespace

node_layout::node_layout(MPI_Comm comm, int ranks_per_node) {
  const int rank = rank_of(comm);
  if (ranks_per_node > 0) MPI_Comm_split(comm, rank / ranks_per_node, rank, &node);
  else MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int first = rank;  // the node's lowest rank, as the split kept the ranks' order
  MPI_Bcast(&first, 1, MPI_INT, 0, node);
  leader = first == rank;
  std::vector<int> firsts(static_cast<std::size_t>(size_of(comm)));
  MPI_Allgather(&first, 1, MPI_INT, firsts.data(), 1, MPI_INT, comm);
  std::vector<int> leaders = firsts;
  std::ranges::sort(leaders);
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  ranks_of.resize(leaders.size());
  node_of.resize(firsts.size());
  for (std::size_t r = 0; r < firsts.size(); ++r) {
    node_of[r] = static_cast<int>(std::ranges::lower_bound(leaders, firsts[r]) - leaders.begin());
    ranks_of[static_cast<std::size_t>(node_of[r])].push_back(static_cast<int>(r));
  }
  index = node_of[static_cast<std::size_t>(rank)];
}

node_layout::~node_layout() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (node != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&node);
}

int node_layout::partner_of(int r) const {
  if (count() < 2) return -1;
  const int n = node_of[static_cast<std::size_t>(r)];
  const std::vector<int>& mine = ranks_of[static_cast<std::size_t>(n)];
  const auto place = static_cast<std::size_t>(std::ranges::find(mine, r) - mine.begin());
  const std::vector<int>& next = ranks_of[static_cast<std::size_t>((n + 1) % count())];
  return next[place % next.size()];
}

local_tiers::local_tiers(MPI_Comm comm, const tiers& levels, const std::string& run_id,
                         const std::filesystem::path& shared)
    : comm_(comm),
      levels_(levels),
      run_(levels.local / layout::tier_run_folder(run_id)),
      nodes_(comm, levels.ranks_per_node) {
  // The run's folder and the node's in it, from the local root down, each level below the root
  // opened without following a link.
  const auto open_run = [&](bool create) {
    return folder_handle::open(levels.local, create).subfolder(run_.filename().string(), create);
  };
  const auto node_in = [&](const folder_handle& run, bool create) {
    return levels.ranks_per_node > 0 ? run.subfolder(layout::tier_node_folder(nodes_.index), create) : run;
  };
  const auto open_node = [&](const folder_handle& node, bool create) {
    own_ = ckpt::detail::folder_store_of(node);
    partner_ = ckpt::detail::folder_store_of(node.subfolder(layout::tier_partner_folder, create));
  };
  // The node's first rank creates and locks the folder, then the others open it.
  std::exception_ptr error;
  if (nodes_.leader) {
    try {
      const folder_handle run = open_run(/*create=*/true);
      const folder_handle node = node_in(run, /*create=*/true);
      lock_ = ckpt::detail::folder_store_of(node)->hold(layout::lock_name);
      open_node(node, /*create=*/true);
      // Which run this is, for ckpt inspect of the local root (a note: the id is what counts).
      const std::string where = ckpt::detail::is_remote(shared) ? shared.string()
                                                                 : std::filesystem::absolute(shared).lexically_normal().string();
      static_cast<void>(ckpt::detail::folder_store_of(run)->write(layout::tier_shared_folder_name, where + "\n",
                                                                  store::existing::replaced));
    } catch (...) {
      record(error);
    }
  }
  settle(comm_, error, run_, "checkpoint_manager (the local tier)");
  if (!nodes_.leader) {
    try {
      open_node(node_in(open_run(/*create=*/false), /*create=*/false), /*create=*/false);
    } catch (...) {
      record(error);
    }
  }
  settle(comm_, error, run_, "checkpoint_manager (the local tier)");
}

std::map<std::int64_t, bool> local_tiers::held_steps() {
  std::map<std::int64_t, node_copies> mine;
  std::exception_ptr error;
  if (nodes_.leader) {
    try {
      for (const auto& [run, partner] : {std::pair{&own_, false}, std::pair{&partner_, true}})
        for (const std::int64_t step : committed_steps(**run)) {
          node_copies& held = mine[step];
          held.step = step;
          (partner ? held.partner : held.own) = shards_in(**run, step_folder_name(step));
        }
    } catch (...) {  // a node whose folder cannot be listed offers nothing
    }
  }
  std::vector<node_copies> listed;
  for (auto& [step, held] : mine) listed.push_back(std::move(held));
  std::map<std::int64_t, std::set<std::string>> shards;
  for (const std::vector<node_copies>& node : gather_all(comm_, listed, "the local tier's steps"))
    for (const node_copies& held : node) {
      shards[held.step].insert(held.own.begin(), held.own.end());
      shards[held.step].insert(held.partner.begin(), held.partner.end());
    }
  std::map<std::int64_t, bool> out;
  for (const auto& [step, names] : shards) out.emplace(step, every_shard(names));
  return out;
}

bool local_tiers::holds(std::int64_t step) {
  int held = 0;
  if (nodes_.leader) {
    const std::string name = step_folder_name(step);
    held = layout::committed_step_folder(*own_, name) || layout::committed_step_folder(*partner_, name) ? 1 : 0;
  }
  MPI_Allreduce(MPI_IN_PLACE, &held, 1, MPI_INT, MPI_MAX, comm_);
  return held != 0;
}

void local_tiers::keep_only(const std::set<std::int64_t>& keep) const noexcept {
  if (!nodes_.leader) return;
  for (const run_store* run : {&own_, &partner_}) {
    try {
      for (const store::entry& e : (*run)->list()) {
        const std::optional<std::int64_t> step = layout::step_of_folder(e.name);
        if (!step || keep.contains(*step)) continue;
        try {
          if (e.what == store::kind::folder) static_cast<void>((*run)->remove(layout::index_of(*step)));
          static_cast<void>((*run)->remove(e.name));
        } catch (const std::exception&) {  // a cache: tried again after the next save
        }
      }
    } catch (const std::exception&) {
    }
  }
}

void local_tiers::write_own(const step_plan& plan, std::span<const section> sections, const save_options& options,
                            ckpt::detail::write_path path) const {
  if (!plan.sliced.empty()) return write_part(plan, own_, sections, options, path);
  step_plan here = plan;
  here.run = own_;
  write_shard(here, sections, options, path);
}

void local_tiers::send_partner_copies(const step_plan& plan, std::exception_ptr& error, MPI_Comm comm) const {
  if (!levels_.partner || nodes_.count() < 2) return;
  const int rank = rank_of(comm);
  std::vector<outgoing> out;
  std::vector<incoming> in;
  if (!error) {
    try {
      if (!file_of(plan).empty())
        out.push_back({nodes_.partner_of(rank), {step_dir(own_, plan.dir_name), file_of(plan)}});
      std::optional<folder_handle> dir;
      for (int r = 0; r < size_of(comm); ++r) {
        const std::string& shard = files_of(plan)[static_cast<std::size_t>(r)];
        if (shard.empty() || nodes_.partner_of(r) != rank) continue;
        if (!dir) dir = step_dir(partner_, plan.dir_name, /*create=*/true);
        in.push_back({r, {*dir, shard}});
      }
    } catch (...) {
      record(error);
    }
  }
  // A rank that failed (its shard unwritten, its lists unmade) stops every rank before any transfer.
  if (agree(comm, error)) return;
  move_files(comm, out, in, error);
}

void local_tiers::commit(const step_plan& plan, std::exception_ptr local_error, bool copies_sent) {
  std::exception_ptr error = local_error;
  if (!copies_sent) send_partner_copies(plan, error, comm_);
  // Every copy durable (each writer returned after its fsyncs): the node's first rank writes the
  // index into both folders, which commits the step there.
  std::optional<failure> f = agree(comm_, error);
  if (!f && nodes_.leader) {
    try {
      const std::string index = ckpt::detail::index_text(plan.total_size, plan.weight_map);
      const bool partners = levels_.partner && nodes_.count() > 1;
      for (const run_store* run : {&own_, &partner_})
        if (run == &own_ || partners)
          static_cast<void>((*run)->write(plan.name_of(index_file_name), index, store::existing::replaced));
    } catch (...) {
      record(error);
    }
  }
  if (!f) f = agree(comm_, error);
  if (!f) return;
  // Undone on every node: the step folders hold nothing committed.
  MPI_Barrier(comm_);
  if (nodes_.leader)
    for (const run_store* run : {&own_, &partner_}) {
      try {
        static_cast<void>((*run)->remove(plan.name_of(index_file_name)));
        static_cast<void>((*run)->remove(plan.dir_name));
      } catch (const std::exception&) {  // debris: removed by keep_only later
      }
    }
  MPI_Barrier(comm_);
  throw_failure(comm_, *f, error, run_, plan.operation + " (the local tier)");
}

void local_tiers::drain(const step_plan& plan, const save_options& options, MPI_Comm comm) const {
  if (!plan.sliced.empty()) {
    // Each rank's part, as the slices it wrote, into the one shard the ranks write together.
    std::exception_ptr error;
    std::vector<section> mine;
    try {
      if (!plan.part.empty()) {
        const file_at part{step_dir(own_, plan.dir_name), plan.part};
        mine.push_back(part_as_slices(ckpt::detail::load_file(part, {.verify_digest = false}), part.path()));
      }
    } catch (...) {
      record(error);
    }
    write_sliced(comm, plan, mine, options, error);
    if (error) std::rethrow_exception(error);
    return;
  }
  if (plan.shard.empty()) return;
  const file_at from{step_dir(own_, plan.dir_name), plan.shard};
  struct stat info {};
  const ckpt::detail::file_descriptor in = from.folder.open_to_read(from.name, info);
  // Into the shared tier's store: a file renamed into place, or an upload.
  const std::unique_ptr<store::file> out = plan.run->create(plan.name_of(plan.shard), store::existing::replaced);
  out->sink().begin(static_cast<std::uint64_t>(info.st_size));
  std::string buffer(static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, static_cast<std::uint64_t>(info.st_size))), '\0');
  for (off_t offset = 0; offset < info.st_size;) {
    const std::size_t wanted = static_cast<std::size_t>(std::min<off_t>(info.st_size - offset, static_cast<off_t>(buffer.size())));
    const std::size_t got = ckpt::detail::read_fully(in.get(), reinterpret_cast<std::byte*>(buffer.data()), wanted, offset, from.path());
    if (got != wanted) throw io_error(from.path(), "read (the file is shorter than it was)", std::make_error_code(std::errc::io_error));
    std::vector<iovec> pieces{{buffer.data(), got}};
    out->sink().write(pieces);
    offset += static_cast<off_t>(got);
  }
  static_cast<void>(out->commit());
}

checkpoint local_tiers::load(const store& shared, std::int64_t step, const load_options& options,
                             std::vector<source>& sources, bool* damaged) {
  const int rank = rank_of(comm_);
  const int size = size_of(comm_);
  const std::string name = step_folder_name(step);
  const std::string operation = "load of step " + std::to_string(step);
  if (damaged != nullptr) *damaged = false;
  const auto settle_load = [&](const std::exception_ptr& e, bool damage) {
    if (const std::optional<failure> f = agree(comm_, e, damage)) {
      if (damaged != nullptr) *damaged = f->preferred;
      throw_failure(comm_, *f, e, run_, operation);
    }
  };

  // 1. What each node holds of the step, and whether the shared folder holds it.
  node_copies mine{step, {}, {}};
  std::exception_ptr error;
  if (nodes_.leader) {
    try {
      mine.own = shards_in(*own_, name);
      mine.partner = shards_in(*partner_, name);
    } catch (...) {  // a folder that cannot be listed offers nothing
      mine = {step, {}, {}};
    }
  }
  std::vector<node_copies> held(static_cast<std::size_t>(nodes_.count()));
  {
    const std::vector<node_copies> all = gather_all(comm_, mine, "the local tier's copies");
    for (int n = 0; n < nodes_.count(); ++n) held[static_cast<std::size_t>(n)] = all[static_cast<std::size_t>(nodes_.leader_of(n))];
  }
  int in_shared = 0;
  if (rank == 0) {
    try {
      in_shared = layout::committed_step_folder(shared, name) ? 1 : 0;
    } catch (...) {  // a shared tier that cannot be looked at offers nothing
    }
  }
  MPI_Bcast(&in_shared, 1, MPI_INT, 0, comm_);

  // 2. The weight map, read by the first node holding a copy, else by rank 0 from the shared folder.
  int reader = -1;
  for (int n = 0; n < nodes_.count() && reader < 0; ++n)
    if (!held[static_cast<std::size_t>(n)].own.empty() || !held[static_cast<std::size_t>(n)].partner.empty())
      reader = nodes_.leader_of(n);
  if (reader < 0 && in_shared != 0) reader = 0;
  if (reader < 0)
    throw std::invalid_argument("ckpt: mpi::load: step " + std::to_string(step) + " is in no tier: no node's local folder ('" +
                                run_.string() + "') and not '" + shared.path_of(name).string() + "' holds it");
  std::map<std::string, std::vector<std::string>, std::less<>> by_shard;
  std::string bytes;
  if (rank == reader) {
    try {
      const store& run = !mine.own.empty() ? *own_ : !mine.partner.empty() ? *partner_ : shared;
      const auto map = read_step_index(run, name);
      if (!map) throw format_error(run.path_of(layout::index_of(step)), "the step's index is gone");
      bytes = encode(*map);
    } catch (...) {
      record(error);
    }
  }
  settle_load(error, is_damage(error));
  broadcast(comm_, bytes, reader);
  by_shard = decode<decltype(by_shard)>(bytes);
  // The files to find a copy of: the index's shards, or, for a step of slices, the ranks' parts
  // (the nodes hold those, the index names the one shard they make).
  std::vector<std::string> units;
  for (const node_copies& h : held)
    for (const std::vector<std::string>* files : {&h.own, &h.partner})
      for (const std::string& f : *files)
        if (const std::optional<std::size_t> count = layout::part_count_of(f); count && units.empty())
          for (std::size_t k = 1; k <= *count; ++k) units.push_back(layout::step_part(k, *count));
  const bool parts = !units.empty();
  if (!parts)
    for (const auto& [shard, names] : by_shard) units.push_back(shard);

  // 3. Each node verifies the copies it holds, its ranks sharing them.
  int node_rank = 0;
  int node_size = 1;
  MPI_Comm_rank(nodes_.node, &node_rank);
  MPI_Comm_size(nodes_.node, &node_size);
  // One copy verified: intact with its hashes, or the reason it is damaged (any other failure is
  // this rank's error).
  // A bucket's copy is fetched whole to be checked, and kept to be sent to every rank (7.).
  std::map<std::string, fetched_shard> fetched;
  const auto check = [&](copy_check c, const store& run) {
    try {
      if (const folder_handle* folder = run.local()) c.hashes = ckpt::detail::verify_file({folder->subfolder_to_read(name), c.shard}, options);
      else fetched.insert_or_assign(c.shard, fetch_shard(run, name + "/" + c.shard, options));
      c.intact = true;
    } catch (const std::exception& e) {
      if (!ckpt::detail::is_damage(e)) record(error);
      c.reason = e.what();
    } catch (...) {
      record(error);
    }
    return c;
  };
  // Every rank's checks, on every rank (a deque: the choices below point into it as it grows).
  std::deque<copy_check> checks;
  const auto share = [&](const std::vector<copy_check>& checked_here, std::string_view what) {
    settle_load(error, false);
    for (std::vector<copy_check>& part : gather_all(comm_, checked_here, what))
      for (copy_check& c : part) checks.push_back(std::move(c));
  };
  {
    std::vector<copy_check> copies;
    for (const std::string& s : held[static_cast<std::size_t>(nodes_.index)].own)
      copies.push_back({nodes_.index, tier::local, s, false, {}, {}});
    for (const std::string& s : held[static_cast<std::size_t>(nodes_.index)].partner)
      copies.push_back({nodes_.index, tier::partner, s, false, {}, {}});
    std::vector<copy_check> checked;
    for (std::size_t i = static_cast<std::size_t>(node_rank); i < copies.size(); i += static_cast<std::size_t>(node_size))
      checked.push_back(check(copies[i], copies[i].from == tier::local ? *own_ : *partner_));
    share(checked, "the checks of the local copies");
  }

  // 4. Each node's choice for each shard: its own intact copy, its partner copy, another node's
  // (the nodes after it first, own copies before partner copies), or the shared folder's.
  const auto find = [&](int node, tier from, const std::string& shard) -> const copy_check* {
    for (const copy_check& c : checks)
      if (c.intact && c.node == node && c.from == from && c.shard == shard) return &c;
    return nullptr;
  };
  std::vector<std::map<std::string, const copy_check*>> chosen(static_cast<std::size_t>(nodes_.count()));
  std::vector<std::string> from_shared;
  for (const std::string& shard : units) {
    for (int b = 0; b < nodes_.count(); ++b) {
      const copy_check* pick = nullptr;
      for (int k = 0; k < nodes_.count() && pick == nullptr; ++k) {
        const int n = (b + k) % nodes_.count();
        pick = find(n, tier::local, shard);
        if (pick == nullptr) pick = find(n, tier::partner, shard);
      }
      chosen[static_cast<std::size_t>(b)][shard] = pick;
      if (pick == nullptr && (from_shared.empty() || from_shared.back() != shard)) from_shared.push_back(shard);
    }
  }
  // A step of slices of which a part has no intact copy on any node: the shared tier's step, if it
  // was drained there (the same on every rank: the checks are shared).
  if (parts && !from_shared.empty() && in_shared != 0) {
    checkpoint result = load_step(comm_, shared, step, options, damaged, &sources);
    return result;
  }
  // Shards no node holds intact: the shared folder's copies, verified shard k by rank k mod size.
  if (!from_shared.empty()) {
    std::vector<copy_check> checked;
    for (std::size_t i = static_cast<std::size_t>(rank); in_shared != 0 && i < from_shared.size(); i += static_cast<std::size_t>(size))
      checked.push_back(check({-1, tier::folder, from_shared[i], false, {}, {}}, shared));
    share(checked, "the checks of the shared copies");
    std::string missing;
    for (const std::string& shard : from_shared) {
      if (find(-1, tier::folder, shard) != nullptr) continue;
      missing += (missing.empty() ? "" : "; ") + shard + ":";
      bool any = false;
      for (const copy_check& c : checks)
        if (c.shard == shard) {
          missing += std::string(any ? "," : "") + " " +
                     (c.node < 0 ? "the shared folder's copy: " : "node " + std::to_string(c.node) + "'s " +
                                                                    std::string(to_string(c.from)) + " copy: ") + c.reason;
          any = true;
        }
      if (!any) missing += in_shared != 0 ? " no copy" : " no copy (the step was not drained to the shared folder)";
    }
    if (!missing.empty()) {
      try {
        throw format_error(run_, "step " + std::to_string(step) +
                                     " has shards without an intact copy in any tier: " + missing);
      } catch (...) {
        record(error);
      }
    }
    // Every rank found the same shards missing (the checks are shared): report it as rank 0's.
    settle_load(rank == 0 ? error : nullptr, true);
    for (auto& choices : chosen)
      for (auto& [shard, pick] : choices)
        if (pick == nullptr) pick = find(-1, tier::folder, shard);
  }

  // 5. Copies another node holds are sent over to this node, which writes them into its step
  // folder: the t-th such file by the (t mod n)-th rank of each of the two nodes, so that every
  // rank of both takes a share.
  {
    std::vector<outgoing> out;
    std::vector<incoming> in;
    try {
      std::optional<folder_handle> here;
      std::size_t t = 0;
      for (const std::string& shard : units)
        for (int b = 0; b < nodes_.count(); ++b) {
          const copy_check* pick = chosen[static_cast<std::size_t>(b)][shard];
          if (pick->node < 0 || pick->node == b) continue;
          const std::vector<int>& senders = nodes_.ranks_of[static_cast<std::size_t>(pick->node)];
          const std::vector<int>& receivers = nodes_.ranks_of[static_cast<std::size_t>(b)];
          const int sender = senders[t % senders.size()];
          const int receiver = receivers[t % receivers.size()];
          ++t;
          if (rank == sender)
            out.push_back({receiver, {step_dir(pick->from == tier::local ? own_ : partner_, name), shard}});
          if (rank == receiver) {
            if (!here) here = step_dir(own_, name, /*create=*/true);
            in.push_back({sender, {*here, shard}});
          }
        }
    } catch (...) {
      record(error);
    }
    if (!agree(comm_, error)) move_files(comm_, out, in, error);
    settle_load(error, false);
  }
  const auto dir_of = [&](const copy_check& pick) {
    return step_dir(pick.node == nodes_.index && pick.from == tier::partner ? partner_ : own_, name);
  };

  // 6. A step of slices: each node's first rank writes the step's one shard from the parts its node
  // now holds (checked against the hashes of the copies they came from) into its step folder; its
  // ranks map it, and it is unlinked (the mappings keep it while the checkpoint lives).
  if (parts) {
    const std::string& shard = by_shard.begin()->first;
    if (nodes_.leader) {
      try {
        std::vector<checkpoint> loaded;
        for (const std::string& part : units) {
          const copy_check& pick = *chosen[static_cast<std::size_t>(nodes_.index)].at(part);
          loaded.push_back(
              ckpt::detail::load_file({dir_of(pick), part}, {.verify_digest = !pick.hashes.empty()}, pick.hashes));
        }
        write_assembled(own_, name, loaded, operation);
      } catch (...) {
        record(error);
      }
    }
    settle_load(error, is_damage(error));
    checkpoint result;
    try {
      result = ckpt::detail::load_file({step_dir(own_, name), shard}, {.verify_digest = false});
    } catch (...) {
      record(error);
    }
    settle_load(error, false);
    if (nodes_.leader) {
      try {
        static_cast<void>(own_->remove(name + "/" + shard));
      } catch (const std::exception&) {  // a file the index names: the node holds the step whole
      }
    }
    sources.clear();
    for (const std::string& part : units) {
      const copy_check& pick = *chosen[static_cast<std::size_t>(nodes_.index)].at(part);
      sources.push_back({part, pick.from, pick.node});
    }
    return result;
  }

  // 7. Every rank maps each shard from where its node has it, checked against the hashes of the
  // copy it came from; a bucket's shards come from the rank that fetched them (every node picks
  // the shared copy of a shard that no node holds intact).
  std::map<std::string, checkpoint> from_bucket;
  if (shared.local() == nullptr)
    for (std::size_t i = 0; i < from_shared.size(); ++i)
      from_bucket.emplace(from_shared[i], share_shard(comm_, fetched[from_shared[i]], static_cast<int>(i % static_cast<std::size_t>(size)),
                                                      shared.path_of(name + "/" + from_shared[i]), error));
  checkpoint result;
  sources.clear();
  try {
    std::map<std::string, folder_handle> dirs;
    for (const auto& [shard, names] : by_shard) {
      const copy_check* pick = chosen[static_cast<std::size_t>(nodes_.index)].at(shard);
      if (pick->node < 0) {
        if (const folder_handle* folder = shared.local()) dirs.emplace(shard, folder->subfolder_to_read(name));
      } else {
        dirs.emplace(shard, dir_of(*pick));
      }
      sources.push_back({shard, pick->from, pick->node < 0 ? 0 : pick->node});
    }
    if (!error)
      result = ckpt::detail::assemble_shards(own_->path_of(layout::index_of(step)), by_shard, [&](const std::string& shard) {
        if (const auto it = from_bucket.find(shard); it != from_bucket.end()) return it->second;
        const copy_check* pick = chosen[static_cast<std::size_t>(nodes_.index)].at(shard);
        return ckpt::detail::load_file({dirs.at(shard), shard}, {.verify_digest = !pick->hashes.empty()}, pick->hashes);
      });
  } catch (...) {
    record(error);
  }
  settle_load(error, is_damage(error));
  return result;
}

}  // namespace ckpt::mpi::detail

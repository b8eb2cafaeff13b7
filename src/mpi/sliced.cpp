// Steps of slices (ckpt::mpi::sliced): global tensors held in pieces by the ranks, laid out and
// checked by plan_step, written collectively with MPI-IO into one plain safetensors file; and the
// reads of slices (read_flat, read_rows).

#include <ckpt/mpi.hpp>
#include <ckpt/detail/pages.hpp>

#include "base/digest.hpp"
#include "base/tuning.hpp"
#include "format/safetensors.hpp"
#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/posix_file.hpp"
#include "common.hpp"
#include "holding.hpp"
#include "step.hpp"

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace ckpt::mpi {

namespace {

std::string range(std::int64_t first, std::int64_t end) {
  return "[" + std::to_string(first) + ", " + std::to_string(end) + ")";
}

// The product of the extents after the first: the elements of one row of the first dimension.
std::int64_t row_elements(std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Throws unless `local` is a block of rows [first_row, first_row + local[0]) of `global`.
void check_rows(std::string_view function, std::string_view name, std::span<const std::int64_t> global,
                std::int64_t first_row, std::span<const std::int64_t> local) {
  const std::string what = "ckpt: mpi::" + std::string(function) + ": ";
  if (global.empty())
    throw std::invalid_argument(what + "'" + std::string(name) + "' of shape [] has no rows");
  if (local.size() != global.size() || !std::equal(local.begin() + 1, local.end(), global.begin() + 1))
    throw std::invalid_argument(what + "a block of rows of '" + std::string(name) + "' " + to_string(global) +
                                " cannot have the shape " + to_string(local));
  if (first_row < 0 || first_row > global[0] - local[0])
    throw std::invalid_argument(what + "rows " + range(first_row, first_row + local[0]) + " of '" + std::string(name) +
                                "' are outside its " + std::to_string(global[0]) + " rows");
}

void check_flat(std::string_view function, std::string_view name, std::int64_t numel, std::int64_t first,
                std::int64_t count) {
  if (first < 0 || first > numel - count)
    throw std::invalid_argument("ckpt: mpi::" + std::string(function) + ": elements " + range(first, first + count) +
                                " of '" + std::string(name) + "' are outside its " + std::to_string(numel) +
                                " elements");
}

// An MPI-IO failure as an io_error naming the file, with the system error MPI's class stands for.
[[noreturn]] void throw_mpi_io(const std::filesystem::path& path, const std::string& operation, int code) {
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(code, &error_class);
  int number = EIO;
  if (error_class == MPI_ERR_NO_SPACE) number = ENOSPC;
  else if (error_class == MPI_ERR_QUOTA) number = EDQUOT;
  else if (error_class == MPI_ERR_ACCESS) number = EACCES;
  else if (error_class == MPI_ERR_NO_SUCH_FILE) number = ENOENT;
  else if (error_class == MPI_ERR_READ_ONLY) number = EROFS;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw io_error(path, operation + " (MPI-IO: " + std::string(text, static_cast<std::size_t>(length)) + ")",
                 std::error_code(number, std::system_category()));
}

// One global tensor of a step of slices, as every rank plans it.
struct tensor_pieces {
  ckpt::dtype type;
  dims shape;
  int described_by;  // the rank whose description the others are checked against
  int whole_writer = -1;  // the lowest rank holding it whole, if any
  struct piece {
    std::int64_t first, count;
    int rank;
  };
  std::vector<piece> pieces;  // the slices, but for empty ones
};

// Checks that the slices of each tensor cover it exactly once; the message names the tensor,
// the ranks and their ranges.
void check_coverage(const std::string& operation, const std::string& name, tensor_pieces& t) {
  const std::string what = "ckpt: mpi::" + operation + ": ";
  if (t.whole_writer >= 0) {
    if (!t.pieces.empty())
      throw std::invalid_argument(what + "the entry '" + name + "' is held whole by rank " +
                                  std::to_string(t.whole_writer) + " and in part by rank " +
                                  std::to_string(t.pieces.front().rank) + " (elements " +
                                  range(t.pieces.front().first, t.pieces.front().first + t.pieces.front().count) + ")");
    return;
  }
  std::ranges::sort(t.pieces, [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.rank < b.rank; });
  const auto held = [](const tensor_pieces::piece& p) {
    return "rank " + std::to_string(p.rank) + "'s " + range(p.first, p.first + p.count);
  };
  std::int64_t end = 0;
  const tensor_pieces::piece* previous = nullptr;
  for (const tensor_pieces::piece& p : t.pieces) {
    if (p.first < end)
      throw std::invalid_argument(what + "the slices of '" + name + "' overlap: rank " + std::to_string(previous->rank) +
                                  " holds elements " + range(previous->first, previous->first + previous->count) +
                                  " and rank " + std::to_string(p.rank) + " " + range(p.first, p.first + p.count));
    if (p.first > end)
      throw std::invalid_argument(what + "the slices of '" + name + "' leave elements " + range(end, p.first) + " out, " +
                                  (previous ? "between " + held(*previous) + " and " : "before ") + held(p));
    end = p.first + p.count;
    previous = &p;
  }
  if (const std::int64_t numel = ckpt::detail::numel_of(t.shape); end < numel)
    throw std::invalid_argument(what + "the slices of '" + name + "' leave elements " + range(end, numel) + " out" +
                                (previous ? ", after " + held(*previous) : " (no rank holds any)"));
}

// What a rank writes in one go: `length` bytes at `offset` of the file, standing in memory
// (`bytes`) or made by a leaf's row writer (rows [first_row, first_row + rows) of `source`).
struct unit {
  std::uint64_t offset = 0;
  std::size_t length = 0;
  const std::byte* bytes = nullptr;
  const ckpt::detail::entry_source* source = nullptr;
  std::size_t first_row = 0, rows = 0;
};

using ckpt::detail::tuning::round_bytes;

// Cuts `source`'s C-order bytes (to go at `offset`) into units of round_bytes at most (whole
// rows for a row writer, at least one).
void add_units(std::vector<unit>& out, const ckpt::detail::entry_source& source, std::uint64_t offset) {
  if (source.nbytes == 0) return;
  if (!source.write_rows) {
    for (std::size_t at = 0; at < source.nbytes; at += round_bytes)
      out.push_back({offset + at, std::min(round_bytes, source.nbytes - at), source.contiguous.data() + at, nullptr, 0, 0});
    return;
  }
  const std::size_t rows = source.row_count(), row = source.row_size();
  const std::size_t step = std::max<std::size_t>(1, round_bytes / row);
  for (std::size_t first = 0; first < rows; first += step) {
    const std::size_t count = std::min(step, rows - first);
    out.push_back({offset + first * row, count * row, nullptr, &source, first, count});
  }
}

// Collective: writes every rank's `units` (sorted by offset) into the open file `file`, in
// rounds of round_bytes a rank at most: each round, one file view of the rank's ranges and one
// MPI_File_write_at_all from a memory type of where the bytes stand (reordered ones staged).
// A failure on this rank is kept in `error`, and the rank still takes part in every round.
void write_units(MPI_Comm comm, MPI_File file, const std::filesystem::path& path, const std::vector<unit>& units,
                 std::exception_ptr& error) {
  // Greedy rounds: consecutive units while they fit.
  std::vector<std::size_t> starts{0};
  for (std::size_t i = 0, filled = 0; i < units.size(); ++i) {
    if (filled > 0 && filled + units[i].length > round_bytes) {
      starts.push_back(i);
      filled = 0;
    }
    filled += units[i].length;
  }
  starts.push_back(units.size());
  int mine = units.empty() ? 0 : static_cast<int>(starts.size() - 1);
  int rounds = 0;
  MPI_Allreduce(&mine, &rounds, 1, MPI_INT, MPI_MAX, comm);
  std::vector<std::byte> staging;
  for (int round = 0; round < rounds; ++round) {
    std::vector<int> lengths;
    std::vector<MPI_Aint> offsets, addresses;
    if (!error && round < mine) {
      try {
        std::size_t staged = 0;
        for (std::size_t i = starts[static_cast<std::size_t>(round)]; i < starts[static_cast<std::size_t>(round) + 1]; ++i)
          if (units[i].source != nullptr) staged += units[i].length;
        staging.resize(staged);
        staged = 0;
        for (std::size_t i = starts[static_cast<std::size_t>(round)]; i < starts[static_cast<std::size_t>(round) + 1]; ++i) {
          const unit& u = units[i];
          if (u.length > static_cast<std::size_t>(INT_MAX))
            throw std::length_error("ckpt: mpi: a row of " + std::to_string(u.length) + " bytes of '" + path.string() +
                                    "' is too long for one MPI-IO write");
          const std::byte* from = u.bytes;
          if (u.source != nullptr) {
            u.source->write_rows(u.first_row, u.rows, staging.data() + staged);
            from = staging.data() + staged;
            staged += u.length;
          }
          MPI_Aint address = 0;
          MPI_Get_address(from, &address);
          lengths.push_back(static_cast<int>(u.length));
          offsets.push_back(static_cast<MPI_Aint>(u.offset));
          addresses.push_back(address);
        }
      } catch (...) {
        error = std::current_exception();
        lengths.clear();
      }
    }
    int code = MPI_SUCCESS;
    if (lengths.empty()) {
      code = MPI_File_set_view(file, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
      if (code == MPI_SUCCESS) code = MPI_File_write_at_all(file, 0, nullptr, 0, MPI_BYTE, MPI_STATUS_IGNORE);
    } else {
      MPI_Datatype file_type = MPI_DATATYPE_NULL, memory_type = MPI_DATATYPE_NULL;
      const int n = static_cast<int>(lengths.size());
      MPI_Type_create_hindexed(n, lengths.data(), offsets.data(), MPI_BYTE, &file_type);
      MPI_Type_commit(&file_type);
      MPI_Type_create_hindexed(n, lengths.data(), addresses.data(), MPI_BYTE, &memory_type);
      MPI_Type_commit(&memory_type);
      code = MPI_File_set_view(file, 0, MPI_BYTE, file_type, "native", MPI_INFO_NULL);
      if (code == MPI_SUCCESS) code = MPI_File_write_at_all(file, 0, MPI_BOTTOM, 1, memory_type, MPI_STATUS_IGNORE);
      MPI_Type_free(&memory_type);
      MPI_Type_free(&file_type);
    }
    if (code != MPI_SUCCESS && !error) {
      try {
        throw_mpi_io(path, "write", code);
      } catch (...) {
        error = std::current_exception();
      }
    }
  }
}

// Runs `f`, keeping its exception in `error` unless an earlier one is there.
template <class F>
void keep_error(std::exception_ptr& error, F&& f) {
  if (error) return;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
}

}  // namespace

slice::slice(std::string name, dims global_shape, std::int64_t first, ckpt::detail::entry_source local, bool rows)
    : name_(std::move(name)), global_shape_(std::move(global_shape)), local_(std::move(local)) {
  const std::int64_t numel = ckpt::detail::numel_of(global_shape_);
  if (rows) {
    check_rows("slice::rows", name_, global_shape_, first, local_.shape);
    first_ = first * row_elements(global_shape_);
  } else {
    check_flat("slice::flat", name_, numel, first, ckpt::detail::numel_of(local_.shape));
    first_ = first;
  }
}

namespace detail {

tensor part_of(const checkpoint& t, std::string_view name, std::int64_t first, ckpt::dtype type, const dims& shape,
               std::string_view function) {
  const tensor& x = t.get(name);
  if (x.dtype() != type)
    throw std::invalid_argument("ckpt: mpi::" + std::string(function) + ": the entry '" + std::string(name) +
                                "' is " + describe_entry(x.dtype(), x.shape()) + ", not " + std::string(to_string(type)));
  const std::int64_t count = ckpt::detail::numel_of(shape);
  check_flat(function, name, x.numel(), first, count);
  const std::size_t element = ckpt::detail::nbytes_of(type, 1);
  const auto owner = std::make_shared<const tensor>(x);  // keeps the file's mapping alive
  return ckpt::detail::tensor_access::view_of(
      type, shape, x.bytes().subspan(static_cast<std::size_t>(first) * element, static_cast<std::size_t>(count) * element),
      owner, ckpt::detail::tensor_access::file_of(x));
}

std::int64_t first_of_rows(const checkpoint& t, std::string_view name, std::int64_t first_row, const dims& local_shape) {
  const tensor& x = t.get(name);
  check_rows("read_rows", name, x.shape(), first_row, local_shape);
  return first_row * row_elements(x.shape());
}

}  // namespace detail

// The way into a slice's leaf (declared in ckpt/mpi.hpp, a friend of slice): what `sliced`
// gives the writer.
struct detail::slice_access {
  static const ckpt::detail::entry_source& local(const slice& s) noexcept { return s.local_; }
};

section sliced(std::span<const slice> slices) {
  std::vector<ckpt::detail::entry_source> entries;
  entries.reserve(slices.size());
  for (const slice& s : slices) {
    ckpt::detail::entry_source& e = entries.emplace_back(detail::slice_access::local(s));
    e.name = s.name();
    e.global_shape = s.global_shape();
    e.first = s.first();
  }
  return ckpt::detail::section_access::of_entries(std::move(entries));
}

namespace detail {

void lay_out_slices(step_plan& plan, const std::vector<holding>& all, int rank) {
  // The global tensors, checked identically on every rank.
  std::map<std::string, tensor_pieces, std::less<>> tensors;
  for (std::size_t r = 0; r < all.size(); ++r) {
    for (const holding::entry& given : all[r].entries) {
      const ckpt::detail::entry_head& x = given.head;
      const auto [it, inserted] = tensors.try_emplace(x.name, tensor_pieces{x.type, x.shape, static_cast<int>(r), -1, {}});
      tensor_pieces& t = it->second;
      if (!inserted && (t.type != x.type || t.shape != x.shape))
        throw std::invalid_argument("ckpt: mpi::" + plan.operation + ": the entry '" + x.name + "' is " +
                                    describe_entry(t.type, t.shape) + " on rank " + std::to_string(t.described_by) +
                                    " but " + describe_entry(x.type, x.shape) + " on rank " + std::to_string(r));
      if (given.count < 0) {
        if (t.whole_writer < 0) t.whole_writer = static_cast<int>(r);
      } else if (given.count > 0) {
        t.pieces.push_back({given.first, given.count, static_cast<int>(r)});
      }
    }
  }
  for (auto& [name, t] : tensors) check_coverage(plan.operation, name, t);

  // The file, laid out as ckpt::save lays out the same whole tensors (name order).
  const std::string shard = ckpt::detail::layout::step_shard(1, 1);
  plan.shards.assign(all.size(), std::string());
  plan.shards[0] = shard;
  plan.shard = plan.shards[static_cast<std::size_t>(rank)];
  for (const auto& [name, t] : tensors) {
    plan.sliced.push_back({{name, t.type, t.shape}, plan.total_size, t.whole_writer});
    plan.total_size += ckpt::detail::nbytes_of(t.type, ckpt::detail::numel_of(t.shape));
    plan.weight_map.emplace_back(name, shard);
    if (t.whole_writer == rank || std::ranges::any_of(t.pieces, [&](const auto& p) { return p.rank == rank; }))
      plan.mine.insert(name);
  }
  // The parts, for the node-local tiers: part k is the k-th writing rank's.
  std::vector<bool> writes(all.size(), false);
  for (const auto& [name, t] : tensors) {
    if (t.whole_writer >= 0) writes[static_cast<std::size_t>(t.whole_writer)] = true;
    for (const auto& p : t.pieces) writes[static_cast<std::size_t>(p.rank)] = true;
  }
  const auto writers = static_cast<std::size_t>(std::ranges::count(writes, true));
  plan.parts.assign(all.size(), std::string());
  for (std::size_t r = 0, k = 0; r < writes.size(); ++r)
    if (writes[r]) plan.parts[r] = ckpt::detail::layout::step_part(++k, writers);
  plan.part = plan.parts[static_cast<std::size_t>(rank)];
}

namespace {

// Every rank's `out[d]` to rank d (MPI_Alltoallv of their bytes); what each rank sent this one, by
// rank.
template <class T>
std::vector<std::vector<T>> exchange_all(MPI_Comm comm, const std::vector<std::vector<T>>& out) {
  const auto size = static_cast<std::size_t>(size_of(comm));
  std::vector<int> send_counts(size), receive_counts(size), send_at(size), receive_at(size);
  std::vector<T> sent;
  for (std::size_t d = 0; d < size; ++d) {
    send_at[d] = static_cast<int>(sent.size() * sizeof(T));
    send_counts[d] = static_cast<int>(out[d].size() * sizeof(T));
    sent.insert(sent.end(), out[d].begin(), out[d].end());
  }
  MPI_Alltoall(send_counts.data(), 1, MPI_INT, receive_counts.data(), 1, MPI_INT, comm);
  std::size_t total = 0;
  for (std::size_t r = 0; r < size; ++r) {
    receive_at[r] = static_cast<int>(total);
    total += static_cast<std::size_t>(receive_counts[r]);
  }
  std::vector<T> received(total / sizeof(T));
  MPI_Alltoallv(sent.data(), send_counts.data(), send_at.data(), MPI_BYTE, received.data(), receive_counts.data(),
                receive_at.data(), MPI_BYTE, comm);
  std::vector<std::vector<T>> in(size);
  for (std::size_t r = 0; r < size; ++r) {
    const auto* from = received.data() + static_cast<std::size_t>(receive_at[r]) / sizeof(T);
    in[r].assign(from, from + static_cast<std::size_t>(receive_counts[r]) / sizeof(T));
  }
  return in;
}

// write_sliced into a folder: the ranks write `units` with MPI-IO into a temporary file, which rank
// 0 renames into place.
void write_in_place(MPI_Comm comm, const step_plan& plan, const ckpt::detail::file_header& header,
                    const std::vector<unit>& units, const save_options& options, std::exception_ptr& error) {
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  const std::string& shard = plan.shards[0];
  const std::filesystem::path target = plan.dir / shard;
  const std::uint64_t data_start = header.bytes.size();
  std::optional<ckpt::detail::folder_handle> dir;
  std::optional<ckpt::detail::atomic_file> file;
  std::string temporary;
  keep_error(error, [&] {
    dir = plan.run->local()->subfolder(plan.dir_name, /*create=*/true);  // never through a link
    if (rank == 0) {
      file.emplace(ckpt::detail::file_at{*dir, shard});
      temporary = file->temporary();
    }
  });
  // A failure so far, on any rank, ends the write on every rank (commit_step reports it).
  if (agree(comm, error)) return;
  broadcast(comm, temporary, 0);

  MPI_File handle = MPI_FILE_NULL;
  const int opened = MPI_File_open(comm, temporary.c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &handle);
  if (opened != MPI_SUCCESS) keep_error(error, [&] { throw_mpi_io(target, "open", opened); });
  if (agree(comm, error)) return;
  write_units(comm, handle, target, units, error);
  if (const int code = MPI_File_sync(handle); code != MPI_SUCCESS) keep_error(error, [&] { throw_mpi_io(target, "fsync", code); });
  if (const int code = MPI_File_close(&handle); code != MPI_SUCCESS) keep_error(error, [&] { throw_mpi_io(target, "close", code); });
  if (agree(comm, error)) return;

  if (options.digest) {
    // Each rank hashes a share of the data's chunks, read back (from the page cache) with pread.
    constexpr std::size_t chunk = ckpt::detail::file_digest_chunk_bytes;
    const std::size_t chunks = static_cast<std::size_t>((plan.total_size + chunk - 1) / chunk);
    std::vector<int> counts(static_cast<std::size_t>(size)), displacements(static_cast<std::size_t>(size));
    for (std::size_t r = 0; r < counts.size(); ++r) {
      displacements[r] = static_cast<int>(chunks * r / counts.size());
      counts[r] = static_cast<int>(chunks * (r + 1) / counts.size()) - displacements[r];
    }
    std::vector<std::uint64_t> mine(static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]));
    keep_error(error, [&] {
      struct stat info {};
      const ckpt::detail::file_descriptor fd = dir->open_to_read(std::filesystem::path(temporary).filename().string(), info);
      std::vector<std::byte> buffer(chunk);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        const std::uint64_t at = static_cast<std::uint64_t>(displacements[static_cast<std::size_t>(rank)] + static_cast<int>(i)) * chunk;
        const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, plan.total_size - at));
        if (ckpt::detail::read_fully(fd.get(), buffer.data(), length, static_cast<off_t>(data_start + at), target) != length)
          throw format_error(target, "the file is shorter than its header says, after it was written");
        mine[i] = ckpt::detail::xxh3_of({buffer.data(), length});
      }
    });
    std::vector<std::uint64_t> hashes(rank == 0 ? chunks : 0);
    MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, hashes.data(), counts.data(),
                displacements.data(), MPI_UINT64_T, 0, comm);
    if (agree(comm, error)) return;
    if (rank == 0)
      keep_error(error, [&] {
        const std::uint64_t value =
            ckpt::detail::file_digest(ckpt::detail::xxh3_of(std::as_bytes(std::span(header.bytes))), hashes);
        file->write_at(ckpt::detail::digest_hex(value), static_cast<off_t>(header.digest_at));
      });
  }
  if (rank == 0) keep_error(error, [&] { file->commit(); });
}

// write_sliced into a bucket: one multipart upload (store::start_parts). Part 1 is the header and
// the first `part_data` bytes of the data, each next part the next `part_data` bytes (a multiple
// of the digest's chunks, so that each chunk lies in one part; the last part shorter): part j
// (from 0) is uploaded by rank j mod n, which receives its bytes from the ranks that hold them, in
// rounds of at most n parts and 1 GiB; then rank 0, once every chunk's hash is in, writes the
// digest into the header and uploads part 1 last, and completes the upload.
void write_as_parts(MPI_Comm comm, const step_plan& plan, const ckpt::detail::file_header& header,
                    const std::vector<unit>& units, const save_options& options, std::exception_ptr& error) {
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  const std::string name = plan.name_of(plan.shards[0]);
  const std::uint64_t data_start = header.bytes.size();
  const std::uint64_t end = data_start + plan.total_size;
  constexpr std::uint64_t chunk = ckpt::detail::file_digest_chunk_bytes;
  constexpr std::uint64_t least = std::uint64_t{8} << 20;  // >= store::min_part_bytes
  constexpr std::uint64_t max_parts = 10'000;              // S3's limit
  const std::uint64_t part_data =
      std::max(least, (plan.total_size / (max_parts - 1) + chunk) / chunk * chunk);
  const std::uint64_t parts = std::max<std::uint64_t>(1, (plan.total_size + part_data - 1) / part_data);
  const auto begin_of = [&](std::uint64_t j) { return j == 0 ? 0 : data_start + j * part_data; };
  const auto end_of = [&](std::uint64_t j) { return std::min(end, data_start + (j + 1) * part_data); };
  const auto part_at = [&](std::uint64_t offset) { return offset < data_start + part_data ? 0 : (offset - data_start) / part_data; };
  const auto owner = [&](std::uint64_t j) { return static_cast<int>(j % static_cast<std::uint64_t>(size)); };
  const std::uint64_t per_round =
      std::clamp<std::uint64_t>((std::uint64_t{1} << 30) / (part_data + data_start), 1, static_cast<std::uint64_t>(size));

  std::string id;
  if (rank == 0) keep_error(error, [&] { id = plan.run->start_parts(name); });
  if (agree(comm, error)) return;
  broadcast(comm, id, 0);

  std::vector<std::byte> first;  // rank 0: part 1, kept until the digest is known
  std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> hashes;  // (first chunk, its hashes) of my parts
  std::vector<std::pair<int, std::string>> tags;                                // (number, tag) of my parts
  std::vector<std::byte> staging;
  std::size_t next = 0;  // the first unit that ends after the round's start
  for (std::uint64_t j0 = 0; j0 < parts; j0 += per_round) {
    const std::uint64_t j1 = std::min(parts, j0 + per_round);
    const std::uint64_t low = begin_of(j0), high = end_of(j1 - 1);
    // What this rank holds of the round, for each part's owner: (offset, length) pairs and the bytes.
    std::vector<std::vector<std::uint64_t>> where(static_cast<std::size_t>(size));
    std::vector<std::vector<std::byte>> bytes(static_cast<std::size_t>(size));
    keep_error(error, [&] {
      while (next < units.size() && units[next].offset + units[next].length <= low) ++next;
      for (std::size_t i = next; i < units.size() && units[i].offset < high; ++i) {
        const unit& u = units[i];
        const std::byte* from = u.bytes;
        if (u.source != nullptr) {
          staging.resize(u.length);
          u.source->write_rows(u.first_row, u.rows, staging.data());
          from = staging.data();
        }
        for (std::uint64_t at = std::max(u.offset, low); at < std::min(u.offset + u.length, high);) {
          const std::uint64_t j = part_at(at);
          const std::uint64_t stop = std::min({end_of(j), u.offset + u.length, high});
          const auto d = static_cast<std::size_t>(owner(j));
          where[d].insert(where[d].end(), {at, stop - at});
          bytes[d].insert(bytes[d].end(), from + (at - u.offset), from + (stop - u.offset));
          at = stop;
        }
      }
    });
    if (error) {
      for (auto& w : where) w.clear();
      for (auto& b : bytes) b.clear();
    }
    const std::vector<std::vector<std::uint64_t>> got_where = exchange_all(comm, where);
    const std::vector<std::vector<std::byte>> got_bytes = exchange_all(comm, bytes);
    // The parts this rank uploads: put together, hashed, sent (part 1 kept).
    for (std::uint64_t j = j0; j < j1; ++j) {
      if (owner(j) != rank) continue;
      keep_error(error, [&] {
        std::vector<std::byte> part(static_cast<std::size_t>(end_of(j) - begin_of(j)));
        std::uint64_t filled = 0;
        for (std::size_t r = 0; r < got_where.size(); ++r)
          for (std::size_t k = 0, at = 0; k < got_where[r].size(); k += 2) {
            const std::uint64_t offset = got_where[r][k], length = got_where[r][k + 1];
            if (offset >= begin_of(j) && offset < end_of(j)) {
              std::memcpy(part.data() + (offset - begin_of(j)), got_bytes[r].data() + at, static_cast<std::size_t>(length));
              filled += length;
            }
            at += static_cast<std::size_t>(length);
          }
        if (filled != part.size())  // the plan covers every byte once: a bug if not
          throw std::logic_error("ckpt: mpi: part " + std::to_string(j + 1) + " of '" + plan.run->path_of(name).string() +
                                 "' got " + std::to_string(filled) + " of its " + std::to_string(part.size()) + " bytes");
        if (options.digest) {
          const std::uint64_t data = std::max(begin_of(j), data_start) - begin_of(j);
          std::vector<std::uint64_t>& mine = hashes.emplace_back((begin_of(j) + data - data_start) / chunk, std::vector<std::uint64_t>{}).second;
          for (std::uint64_t at = data; at < part.size(); at += chunk)
            mine.push_back(ckpt::detail::xxh3_of({part.data() + at, static_cast<std::size_t>(std::min<std::uint64_t>(chunk, part.size() - at))}));
        }
        if (j == 0) first = std::move(part);
        else tags.emplace_back(static_cast<int>(j + 1), plan.run->put_part(name, id, static_cast<int>(j + 1), part));
      });
    }
  }
  const auto all_hashes = gather_all(comm, hashes, "the hashes of the parts");
  const auto all_tags = gather_all(comm, tags, "the tags of the parts");
  if (agree(comm, error)) {
    if (rank == 0) plan.run->abort_parts(name, id);
    return;
  }
  if (rank != 0) return;
  keep_error(error, [&] {
    if (options.digest) {
      std::vector<std::uint64_t> chunks(static_cast<std::size_t>((plan.total_size + chunk - 1) / chunk));
      for (const auto& of_rank : all_hashes)
        for (const auto& [at, values] : of_rank) std::ranges::copy(values, chunks.begin() + static_cast<std::ptrdiff_t>(at));
      const std::uint64_t value =
          ckpt::detail::file_digest(ckpt::detail::xxh3_of(std::as_bytes(std::span(header.bytes))), chunks);
      const std::string digits = ckpt::detail::digest_hex(value);
      std::memcpy(first.data() + header.digest_at, digits.data(), digits.size());
    }
    std::vector<std::string> ordered(static_cast<std::size_t>(parts));
    for (const auto& of_rank : all_tags)
      for (const auto& [number, tag] : of_rank) ordered[static_cast<std::size_t>(number - 1)] = tag;
    ordered[0] = plan.run->put_part(name, id, 1, first);
    static_cast<void>(plan.run->finish_parts(name, id, ordered, end, ckpt::detail::store::existing::replaced));
  });
  if (error) plan.run->abort_parts(name, id);
}

}  // namespace

void write_sliced(MPI_Comm comm, const step_plan& plan, std::span<const section> sections, const save_options& options,
                  std::exception_ptr& error) {
  const int rank = rank_of(comm);
  std::map<std::string_view, const step_plan::global_tensor*, std::less<>> by_name;
  std::vector<ckpt::detail::entry_source> layout;
  layout.reserve(plan.sliced.size());
  for (const step_plan::global_tensor& t : plan.sliced) {
    by_name.emplace(t.name, &t);
    layout.push_back({.name = t.name, .dtype = t.type, .shape = t.shape,
                      .nbytes = ckpt::detail::nbytes_of(t.type, ckpt::detail::numel_of(t.shape)), .contiguous = {},
                      .write_rows = {}, .keep_alive = {}, .global_shape = {}, .first = -1});
  }
  std::vector<const ckpt::detail::entry_source*> order;
  order.reserve(layout.size());
  for (const ckpt::detail::entry_source& e : layout) order.push_back(&e);
  const ckpt::detail::file_header header = ckpt::detail::make_file_header(
      order, plan.metadata, options.digest ? ckpt::detail::digest_key : std::string_view());
  // What this rank writes, in file order.
  const std::uint64_t data_start = header.bytes.size();
  std::vector<unit> units;
  keep_error(error, [&] {
    if (rank == 0) units.push_back({0, header.bytes.size(), reinterpret_cast<const std::byte*>(header.bytes.data()), nullptr, 0, 0});
    for (const auto* e : ckpt::detail::ordered_entries(sections, "mpi::" + plan.operation, ckpt::detail::slices_are::taken)) {
      if (!plan.mine.contains(e->name)) continue;
      const step_plan::global_tensor& t = *by_name.at(e->name);
      const std::uint64_t at = e->first < 0 ? 0 : static_cast<std::uint64_t>(e->first) * ckpt::detail::nbytes_of(e->dtype, 1);
      add_units(units, *e, data_start + t.offset + at);
    }
    std::ranges::sort(units, {}, &unit::offset);
  });

  if (plan.run->local() != nullptr) write_in_place(comm, plan, header, units, options, error);
  else write_as_parts(comm, plan, header, units, options, error);
}

namespace {

// The note of a part file's metadata that says where its entry `name` lies in the global tensor:
// "<first element> <global extent>...". An entry without one is whole.
constexpr std::string_view slice_note = "ckpt.mpi.slice.";

}  // namespace

void write_part(const step_plan& plan, const run_store& run, std::span<const section> sections,
                const save_options& options, ckpt::detail::write_path path) {
  if (plan.part.empty()) return;
  step_plan here = plan;
  here.run = run;
  here.shard = plan.part;
  std::vector<ckpt::detail::entry_source> entries;
  const std::string function = "mpi::" + plan.operation;
  for (const auto* e : ckpt::detail::ordered_entries(sections, function, ckpt::detail::slices_are::taken)) {
    if (!plan.mine.contains(e->name)) continue;
    ckpt::detail::entry_source& x = entries.emplace_back(*e);
    if (x.first < 0) continue;
    std::string note = std::to_string(x.first);
    for (const std::int64_t d : x.global_shape) note += " " + std::to_string(d);
    if (!here.metadata.emplace(std::string(slice_note) + x.name, note).second)
      throw std::invalid_argument("ckpt: mpi::" + plan.operation + ": this rank holds several slices of '" + x.name +
                                  "', which a node-local tier's part of the step cannot keep apart (one slice a "
                                  "tensor and rank)");
    x.first = -1;
    x.global_shape = {};
  }
  const section part = ckpt::detail::section_access::of_entries(std::move(entries));
  write_shard(here, std::span(&part, 1), options, path);
}

section part_as_slices(const checkpoint& part, const std::filesystem::path& file) {
  std::vector<ckpt::detail::entry_source> entries;
  for (const auto& [name, x] : part) {
    ckpt::detail::entry_source& e = entries.emplace_back(ckpt::detail::tensor_source(name, x));
    const auto note = part.metadata().find(std::string(slice_note) + name);
    if (note == part.metadata().end()) continue;
    std::istringstream in(note->second);
    in >> e.first;
    for (std::int64_t d = 0; in >> d;) e.global_shape.push_back(d);
    if (e.first < 0 || e.global_shape.empty() || !in.eof())
      throw format_error(file, "the note '" + note->first + "' of a part of a step of slices is malformed: '" +
                                   note->second + "'");
  }
  return ckpt::detail::section_access::of_entries(std::move(entries));
}

void write_assembled(const run_store& run, const std::string& dir_name, std::span<const checkpoint> parts,
                     const std::string& operation) {
  step_plan plan;
  plan.run = run;
  plan.folder = run->path_of("");
  plan.dir_name = dir_name;
  plan.dir = run->path_of(dir_name);
  plan.operation = operation;
  std::vector<section> sections;
  std::vector<holding> all;
  bool digest = false;
  for (const checkpoint& part : parts) {
    section& s = sections.emplace_back(part_as_slices(part, plan.dir));
    holding& h = all.emplace_back();
    for (const ckpt::detail::entry_source& e : ckpt::detail::section_access::entries(s)) h.entries.push_back(held_entry(e));
    for (const auto& [key, value] : part.metadata()) {
      if (ckpt::detail::is_digest_key(key)) digest = true;
      else if (!key.starts_with(slice_note)) plan.metadata.insert_or_assign(key, value);
    }
  }
  lay_out_slices(plan, all, 0);
  for (const step_plan::global_tensor& t : plan.sliced) plan.mine.insert(t.name);
  std::exception_ptr error;
  write_sliced(MPI_COMM_SELF, plan, sections, {.digest = digest}, error);
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

}  // namespace ckpt::mpi

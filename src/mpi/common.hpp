#pragma once
// What the collective functions of ckpt::mpi share: agreeing on an outcome (every rank returns or
// every rank throws), broadcasting bytes, and a byte encoding for the few values ranks exchange.

#include <ckpt/mpi.hpp>

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ckpt::mpi::detail {

inline int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

inline int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

inline std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    // Never empty: an empty message means "no failure" where ranks exchange them.
    const std::string what = x.what();
    return what.empty() ? "an exception without a message" : what;
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// Appends values to a byte string, and reads them back in the same order.
class encoder {
 public:
  void u64(std::uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void i64(std::int64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void f64(double v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  [[nodiscard]] std::string& bytes() noexcept { return out_; }

 private:
  std::string out_;
};

class decoder {
 public:
  explicit decoder(std::string_view in) noexcept : in_(in) {}
  std::uint64_t u64() { return fixed<std::uint64_t>(); }
  std::int64_t i64() { return fixed<std::int64_t>(); }
  double f64() { return fixed<double>(); }
  std::string str() {
    const std::uint64_t n = u64();
    take(n);
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }

 private:
  template <class T>
  T fixed() {
    take(sizeof(T));
    T v;
    std::memcpy(&v, in_.data(), sizeof v);
    in_.remove_prefix(sizeof v);
    return v;
  }
  void take(std::uint64_t n) const {
    // Every rank runs the same encoder, so a short message is a bug here, not bad input.
    if (n > in_.size()) throw std::logic_error("ckpt: mpi: truncated message between ranks");
  }
  std::string_view in_;
};

// Sends `bytes` from `root` to every rank of `comm` (collective).
inline void broadcast(MPI_Comm comm, std::string& bytes, int root) {
  std::uint64_t n = bytes.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm);
  if (n > static_cast<std::uint64_t>(INT_MAX))
    throw std::length_error("ckpt: mpi: a message of " + std::to_string(n) + " bytes between ranks is too long");
  bytes.resize(n);
  if (n > 0) MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, root, comm);
}

// A failure agreed on by every rank: the lowest failing rank and its message.
struct failure {
  int rank;
  std::string message;
};

// Collective: nothing if no rank passes an error, else the lowest failing rank's message, on
// every rank. One MPI_Allreduce when all went well, and a broadcast of the message otherwise.
inline std::optional<failure> agree(MPI_Comm comm, const std::exception_ptr& local) {
  const int size = size_of(comm);
  const int mine = local ? rank_of(comm) : size;
  int lowest = size;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm);
  if (lowest == size) return std::nullopt;
  std::string message = lowest == mine ? message_of(local) : std::string();
  broadcast(comm, message, lowest);
  return failure{lowest, std::move(message)};
}

// Throws `f` as a collective_error, with this rank's own exception nested if it is the one
// that failed.
[[noreturn]] inline void throw_failure(MPI_Comm comm, const failure& f, const std::exception_ptr& local,
                                       const std::filesystem::path& folder, const std::string& operation) {
  const collective_error error(folder,
                               "ckpt: mpi::" + operation + " in '" + folder.string() + "' failed on rank " +
                                   std::to_string(f.rank) + " of " + std::to_string(size_of(comm)) + ": " +
                                   f.message,
                               f.rank, f.message);
  if (local && f.rank == rank_of(comm)) {
    try {
      std::rethrow_exception(local);
    } catch (...) {
      std::throw_with_nested(error);
    }
  }
  throw error;
}

// agree(), then throw_failure() if some rank failed.
inline void settle(MPI_Comm comm, const std::exception_ptr& local, const std::filesystem::path& folder,
                   const std::string& operation) {
  if (const std::optional<failure> f = agree(comm, local)) throw_failure(comm, *f, local, folder, operation);
}

}  // namespace ckpt::mpi::detail

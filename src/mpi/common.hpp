#pragma once
// What the collective functions of ckpt::mpi share: agreeing on an outcome (every rank returns or
// every rank throws), broadcasting bytes, and the byte codec of the few values ranks exchange.

#include <ckpt/mpi.hpp>

#include <mpi.h>

#include <boost/pfr/core.hpp>

#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ckpt::mpi::detail {

// What `query` (MPI_Comm_rank, MPI_Comm_size) says of `comm`.
inline int ask(int (*query)(MPI_Comm, int*), MPI_Comm comm) {
  int value = 0;
  query(comm, &value);
  return value;
}
// This process's rank in `comm`, and the number of ranks.
inline int rank_of(MPI_Comm comm) { return ask(MPI_Comm_rank, comm); }
inline int size_of(MPI_Comm comm) { return ask(MPI_Comm_size, comm); }

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

// The one byte codec of what ranks exchange. Numbers and enums go as their bytes (every rank
// runs the same build), strings and paths as a length and their bytes, optionals as a flag and
// the value, vectors and maps as a count and their elements, and an aggregate struct field by
// field (Boost.PFR), by one visitor that writes or reads (byte_codec), so that no type's encoding
// and decoding are written twice.
template <class T>
inline constexpr bool is_vector = false;
template <class T>
inline constexpr bool is_vector<std::vector<T>> = true;
template <class T>
inline constexpr bool is_map = false;
template <class K, class V, class C>
inline constexpr bool is_map<std::map<K, V, C>> = true;
template <class T>
inline constexpr bool is_optional = false;
template <class T>
inline constexpr bool is_optional<std::optional<T>> = true;

// The codec's one visitor, in either direction: `Writing` appends the bytes of what it visits to
// bytes(), else it reads them from the bytes it was given into what it visits (a count of
// elements or bytes each taking at least a byte, checked against what is left).
template <bool Writing>
class byte_codec {
 public:
  byte_codec() noexcept requires Writing = default;
  explicit byte_codec(std::string_view in) noexcept requires(!Writing) : in_(in) {}
  // `X` is const when writing.
  template <class X>
  void operator()(X& x) {
    using T = std::remove_const_t<X>;
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      if constexpr (Writing) out_.append(reinterpret_cast<const char*>(&x), sizeof x);
      else std::memcpy(&x, take(sizeof x).data(), sizeof x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      const std::size_t n = count(x.size());
      if constexpr (Writing) out_.append(x);
      else x = std::string(take(n));
    } else if constexpr (std::is_same_v<T, std::filesystem::path>) {
      std::string s = Writing ? x.string() : std::string();
      (*this)(s);
      if constexpr (!Writing) x = std::move(s);
    } else if constexpr (is_optional<T>) {
      bool has = x.has_value();
      (*this)(has);
      if constexpr (Writing) {
        if (has) (*this)(*x);
      } else {
        x.reset();
        if (has) (*this)(x.emplace());
      }
    } else if constexpr (is_vector<T>) {
      const std::size_t n = count(x.size());
      if constexpr (!Writing) x.resize(n);
      for (auto& element : x) (*this)(element);
    } else if constexpr (is_map<T>) {
      const std::size_t n = count(x.size());
      if constexpr (Writing) {
        for (const auto& element : x) (*this)(element);
      } else {
        x.clear();
        for (std::size_t i = 0; i < n; ++i) {
          std::pair<typename T::key_type, typename T::mapped_type> element;
          (*this)(element);
          x.insert_or_assign(std::move(element.first), std::move(element.second));
        }
      }
    } else if constexpr (requires { x.first; x.second; }) {
      (*this)(x.first);
      (*this)(x.second);
    } else {
      boost::pfr::for_each_field(x, [this](auto& field) { (*this)(field); });
    }
  }
  [[nodiscard]] std::string& bytes() noexcept requires Writing { return out_; }

 private:
  // A count of elements or bytes: `n` written, or the count read, each of which takes at least a
  // byte of what is left.
  std::size_t count(std::size_t n) {
    std::uint64_t c = n;
    (*this)(c);
    if constexpr (!Writing) take_check(c);
    return static_cast<std::size_t>(c);
  }
  std::string_view take(std::uint64_t n) {
    take_check(n);
    const std::string_view out = in_.substr(0, static_cast<std::size_t>(n));
    in_.remove_prefix(static_cast<std::size_t>(n));
    return out;
  }
  void take_check(std::uint64_t n) const {
    // Every rank runs the same codec, so a short message is a bug here, not bad input.
    if (n > in_.size()) throw std::logic_error("ckpt: mpi: truncated message between ranks");
  }
  std::string out_;      // writing
  std::string_view in_;  // reading
};

// `x` as bytes, and back.
template <class T>
std::string encode(const T& x) {
  byte_codec<true> w;
  w(x);
  return std::move(w.bytes());
}
template <class T>
T decode(std::string_view bytes) {
  byte_codec<false> r(bytes);
  T x{};
  r(x);
  return x;
}

// Sends `bytes` from `root` to every rank of `comm` (collective).
inline void broadcast(MPI_Comm comm, std::string& bytes, int root) {
  std::uint64_t n = bytes.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm);
  if (n > static_cast<std::uint64_t>(INT_MAX))
    throw std::length_error("ckpt: mpi: a message of " + std::to_string(n) + " bytes between ranks is too long");
  bytes.resize(n);
  if (n > 0) MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, root, comm);
}

// Every rank's `mine`, on every rank, in rank order: one MPI_Allgather of the sizes, one
// MPI_Allgatherv of the encoded values. `what` names the values in the error of a message too long.
// \throws std::length_error if the values come to 2 GiB or more.
template <class T>
std::vector<T> gather_all(MPI_Comm comm, const T& mine, std::string_view what) {
  const std::string bytes = encode(mine);
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw std::length_error("ckpt: mpi: " + std::string(what) + " of this rank is too long to send");
  const int count = static_cast<int>(bytes.size());
  std::vector<int> counts(static_cast<std::size_t>(size_of(comm)));
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  std::vector<int> offsets(counts.size());
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += counts[r];
    if (total > INT_MAX) throw std::length_error("ckpt: mpi: " + std::string(what) + " of the ranks are too long to send");
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(bytes.data(), count, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, comm);
  std::vector<T> out;
  out.reserve(counts.size());
  for (std::size_t r = 0; r < counts.size(); ++r)
    out.push_back(decode<T>(std::string_view(all).substr(static_cast<std::size_t>(offsets[r]),
                                                          static_cast<std::size_t>(counts[r]))));
  return out;
}

// A failure agreed on by every rank: the lowest failing rank and its message, and whether it
// was one of the failures `agree` was told to prefer.
struct failure {
  int rank;
  std::string message;
  bool preferred = false;
};

// Collective: nothing if no rank passes an error, else the lowest failing rank's message, on
// every rank; a rank whose failure is `preferred` (say, damage rather than a missing resource)
// goes before the others. One MPI_Allreduce when all went well, and a broadcast of the message
// otherwise.
inline std::optional<failure> agree(MPI_Comm comm, const std::exception_ptr& local, bool preferred = false) {
  const int size = size_of(comm);
  const int rank = rank_of(comm);
  // Preferred failures sort before the others, each by rank; no failure sorts last.
  const int mine = !local ? 2 * size : preferred ? rank : size + rank;
  int lowest = 2 * size;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm);
  if (lowest == 2 * size) return std::nullopt;
  const int winner = lowest % size;
  std::string message = winner == rank ? message_of(local) : std::string();
  broadcast(comm, message, winner);
  return failure{winner, std::move(message), lowest < size};
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

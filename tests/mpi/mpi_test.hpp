#pragma once
// A minimal harness for the MPI tests: each test is a plain program run by mpirun at 1, 2 and 4
// ranks (tests/mpi/CMakeLists.txt). Boost.Test would run its cases independently on each rank,
// which does not fit collective calls; here every rank runs the same cases in the same order, and
// a failed CHECK on any rank prints the rank, the place and the values, and aborts the whole job
// (MPI_Abort), so that mpirun, and ctest, report the failure instead of hanging in a collective.

#include <ckpt/checkpoint.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/tensor.hpp>

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <ranges>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <stdlib.h>  // mkdtemp (POSIX)

namespace ckpt_mpi_test {

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

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::cerr << "FAILED on rank " << rank_of(MPI_COMM_WORLD) << " of " << size_of(MPI_COMM_WORLD) << " at " << file
            << ':' << line << ": " << what << std::endl;
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // not reached
}

template <class T>
void show_value(std::ostream& out, const T& x) {
  if constexpr (requires { out << x; }) {
    out << x;
  } else if constexpr (requires { x.has_value(); *x; }) {
    if (x.has_value()) show_value(out, *x);
    else out << "nothing";
  } else if constexpr (std::ranges::range<T>) {
    out << '[';
    bool first = true;
    for (const auto& e : x) {
      out << (first ? "" : ", ");
      first = false;
      show_value(out, e);
    }
    out << ']';
  } else {
    out << "(a value that cannot be printed)";
  }
}

template <class A, class B>
std::string show_pair(const A& a, const B& b) {
  std::ostringstream out;
  out << "\n  left:  ";
  show_value(out, a);
  out << "\n  right: ";
  show_value(out, b);
  return out.str();
}

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) ::ckpt_mpi_test::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (false)

#define CHECK_EQ(a, b)                                                                               \
  do {                                                                                               \
    /* copies: an operand may refer into a temporary that dies with its own full-expression */      \
    const auto check_a_ = (a);                                                                       \
    const auto check_b_ = (b);                                                                       \
    if (!(check_a_ == check_b_))                                                                     \
      ::ckpt_mpi_test::fail(__FILE__, __LINE__,                                                      \
                            "CHECK_EQ(" #a ", " #b ")" + ::ckpt_mpi_test::show_pair(check_a_, check_b_)); \
  } while (false)

// Runs `f`, which must throw E, and returns the exception's what().
template <class E, class F>
std::string message_of(F&& f, const char* file, int line) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  fail(file, line, "no exception was thrown");
}
#define MESSAGE_OF(E, ...) ::ckpt_mpi_test::message_of<E>([&] { __VA_ARGS__; }, __FILE__, __LINE__)

// Same bytes, dtype, shape and names.
inline bool same(const ckpt::checkpoint& a, const ckpt::checkpoint& b) {
  if (a.names() != b.names()) return false;
  return std::ranges::all_of(a, [&b](const ckpt::checkpoint::entry& e) {
    const ckpt::tensor& y = b.get(e.first);
    const ckpt::tensor& x = e.second;
    return x.dtype() == y.dtype() && std::ranges::equal(x.shape(), y.shape()) &&
           std::ranges::equal(x.bytes(), y.bytes());
  });
}

// The committed steps of an MPI run folder, as a read-only single-process manager lists them
// (a step folder counts once its index is written); none if there is no folder.
inline std::vector<std::int64_t> committed_steps(const std::filesystem::path& folder) {
  if (!std::filesystem::exists(folder)) return {};
  return ckpt::checkpoint_manager(folder, {.read_only = true}).steps();
}

// The file names in `folder`, sorted (empty if it does not exist).
inline std::vector<std::string> listing(const std::filesystem::path& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::ranges::sort(names);
  return names;
}

// The id of the run whose folder is `shared` (its `.ckpt-run-id`, one line), "" if it has none.
inline std::string run_id_of(const std::filesystem::path& shared) {
  std::ifstream in(shared / ".ckpt-run-id");
  std::string id;
  std::getline(in, id);
  return id;
}

// The node-local folder of that run under the local root `local`: `<local>/run-<id>`.
inline std::filesystem::path run_tier(const std::filesystem::path& local, const std::filesystem::path& shared) {
  const std::string id = run_id_of(shared);
  if (id.empty()) fail(__FILE__, __LINE__, "'" + shared.string() + "' has no run id");
  return local / ("run-" + id);
}

// A folder shared by every rank of MPI_COMM_WORLD: rank 0 makes it, everyone learns its name;
// rank 0 removes it at the end.
class shared_dir {
 public:
  explicit shared_dir(const std::string& name) {
    std::string path;
    if (rank_of(MPI_COMM_WORLD) == 0) {
      path = (std::filesystem::temp_directory_path() / ("ckpt-" + name + "-XXXXXX")).string();
      if (::mkdtemp(path.data()) == nullptr) fail(__FILE__, __LINE__, "mkdtemp: " + std::string(std::strerror(errno)));
    }
    int n = static_cast<int>(path.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(n));
    MPI_Bcast(path.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
    root_ = path;
  }
  shared_dir(const shared_dir&) = delete;
  shared_dir& operator=(const shared_dir&) = delete;
  ~shared_dir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ignored;
    if (rank_of(MPI_COMM_WORLD) == 0) std::filesystem::remove_all(root_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return root_; }

 private:
  std::filesystem::path root_;
};

// The test program: every rank runs the cases in order, each in a fresh sub-folder of a shared
// temporary folder; an exception escaping a case fails the job like a CHECK.
struct test_case {
  const char* name;
  std::function<void(const std::filesystem::path& folder)> run;
};

// With the argument --thread-multiple, MPI is initialized with MPI_THREAD_MULTIPLE (the managers'
// background threads then take part in collective work), else with MPI_Init.
inline int run_all(int argc, char** argv, const char* program, const std::vector<test_case>& cases) {
  if (argc > 1 && std::string_view(argv[1]) == "--thread-multiple") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) fail(program, 0, "MPI_THREAD_MULTIPLE is not provided");
  } else {
    MPI_Init(&argc, &argv);
  }
  {
    const shared_dir dir(program);
    for (const test_case& c : cases) {
      MPI_Barrier(MPI_COMM_WORLD);
      try {
        c.run(dir.path() / c.name);
      } catch (const std::exception& e) {
        fail(program, 0, std::string(c.name) + ": unexpected exception: " + e.what());
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank_of(MPI_COMM_WORLD) == 0)
        std::cout << program << ": " << c.name << " passed on " << size_of(MPI_COMM_WORLD) << " ranks" << std::endl;
    }
  }
  MPI_Finalize();
  return 0;
}

}  // namespace ckpt_mpi_test

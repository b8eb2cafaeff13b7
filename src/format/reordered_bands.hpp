#pragma once
// The C-order bytes of the entries that must be reordered on the way to the file (column-major
// leaves), a band of whole rows at a time, made on a helper thread that runs one band ahead of
// the writer: while one band is hashed and written, the next is being transposed. A band holds
// the rows of one entry or of several that follow each other in the file, so that small
// matrices do not cost a hand-over each.

#include <ckpt/detail/entry_source.hpp>

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

namespace ckpt::detail {

class reordered_bands {
 public:
  // The bands of every entry of `entries` that has `write_rows` and bytes, in entry order.
  // `entries` must outlive this object.
  explicit reordered_bands(entry_list entries);
  reordered_bands(const reordered_bands&) = delete;
  reordered_bands& operator=(const reordered_bands&) = delete;
  ~reordered_bands();

  struct band {
    std::span<const std::byte> bytes;  // the next bytes of the data section
    std::size_t next_entry = 0;        // the index of the entry the bytes after them belong to
  };
  // The next band, for the writer standing at the first entry it has not written that needs
  // reordering: its bytes stay valid until the next call. Rethrows what a `write_rows` threw;
  // std::logic_error if no band is left (the writer's loop went wrong).
  [[nodiscard]] band next();

 private:
  struct slot {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size = 0;
    std::size_t next_entry = 0;
    bool full = false;
  };
  // Fills `s` with the band at the cursor and advances it; false when no band is left.
  bool produce(slot& s);
  void run(const std::stop_token& stop);

  entry_list entries_;
  std::size_t entry_ = 0;  // the producer's cursor: an entry and the first row of its next band
  std::size_t row_ = 0;
  std::size_t capacity_ = 0;  // of each slot
  slot slots_[2];
  std::size_t consumed_ = 0;  // bands handed out by next()
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::exception_ptr error_;
  bool done_ = false;
  std::jthread helper_;  // last: joined before the rest is destroyed
};

}  // namespace ckpt::detail

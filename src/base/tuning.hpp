#pragma once
// The compiled library's tuning constants, in one place: sizes that choose between two ways of
// doing the same work, none of them part of a contract. Each says what it trades; the
// measurements that chose the values are in CHANGELOG.md, "Performance history" ("Tuning
// figures" and the library changes), and bench/README.md, "What do the library's tuning
// constants trade?", lists them.

#include <cstddef>

namespace ckpt::detail::tuning {

// Memory (src/base/memory.cpp).
// Buffers below this come from the heap; this size and more are mappings with huge pages asked
// for, kept when given back: fewer page faults against memory the heap could have reused.
inline constexpr std::size_t heap_limit = std::size_t{32} << 20;
// The staging band a loaded file's bytes are read into to be transposed, converted or hashed:
// about a core's L2 cache, so the band is worked on while it is still there.
inline constexpr std::size_t staging_bytes = std::size_t{1} << 20;

// Copies out of a loaded file (src/tensor/pages.cpp).
// A copy of this many bytes or more is split between two threads: a second core's bandwidth
// against the cost of a thread.
inline constexpr std::size_t parallel_copy_bytes = std::size_t{1} << 20;
// The bytes of whole rows a transposing read reads at a time: small enough to stay in L2 with the
// transpose's block buffer, large enough for few reads.
inline constexpr std::size_t transpose_band_bytes = std::size_t{256} << 10;

// The transpose (src/base/transpose.cpp, src/base/transpose_tiles.hpp).
// A matrix of this many bytes or more is transposed on two threads: a second core's bandwidth
// against the cost of a thread.
inline constexpr std::size_t parallel_transpose_bytes = std::size_t{1} << 20;
// A side of a square cache block of the transpose (256 floats: a 256 KiB block), sized so a
// source and a destination block share L2; smaller blocks return to the same pages more often.
inline constexpr std::size_t block_bytes = 1024;

// The extraction of structures from a checkpoint (src/structures/params.cpp).
// Entries of a loaded file below this are read a band of neighbours at a time, larger ones a
// `pread` each: one call for many small entries against a copy through the band.
inline constexpr std::size_t staged_bytes = std::size_t{16} << 10;
// An extraction of this many bytes or more reads two runs of leaves on two threads (a thread for
// the call, not one for each large leaf).
inline constexpr std::size_t parallel_read_bytes = std::size_t{2} << 20;
// Leaves of at least this many bytes on average are read in file order (a cold file reads
// sequentially), smaller ones in the leaves' order (their memory's order matters more).
inline constexpr std::size_t file_order_bytes = 4096;

// The file writer and the digest (src/format/writer.cpp, src/format/reordered_bands.hpp).
// The band the writer reorders a column-major leaf into, then hashes and writes while it is in
// L2: smaller bands cost more hand-overs between the threads than they save.
inline constexpr std::size_t band_bytes = std::size_t{2} << 20;
// Less than this to reorder in all is reordered on the writing thread: a helper costs more.
inline constexpr std::size_t threaded_bytes = std::size_t{2} << 20;
// The writer hashes what it writes in slices of this size, each while it is still in the cache.
inline constexpr std::size_t hash_slice_bytes = std::size_t{2} << 20;
// A save written with direct I/O (a manager's background save) is copied into an aligned staging
// buffer of this size and written a buffer a call: fewer, larger writes against a buffer that
// falls out of the cache between its copy and its write.
inline constexpr std::size_t direct_write_bytes = std::size_t{8} << 20;
// A data section of this many bytes or more is verified on two threads: one core hashes below
// the memory's bandwidth.
inline constexpr std::size_t parallel_hash_bytes = std::size_t{8} << 20;

// A manager's background save, once its snapshot's copies are made, runs at this niceness (19,
// the lowest priority) while its writes end before the next call: where training keeps every core
// busy, its hashing and writing then take the time the loop leaves idle rather than the loop's.
// A write the next call has to wait for lowers the niceness of the following ones
// (src/run/background.hpp).
inline constexpr int writer_nice = 19;

// Snapshots (src/structures/snapshot.cpp).
// A snapshot's copy takes a thread (up to four) per this many bytes: a thread's start against
// the bandwidth it adds.
inline constexpr std::size_t snapshot_bytes_per_thread = std::size_t{64} << 20;
// A snapshot's entry is copied in pieces of this size, which the threads that need it share (a
// background save's helpers, an update's threads): a piece's hand-over against a thread waiting
// for another's copy of a large leaf. A snapshot whose data section is hashed as it is copied
// uses the digest's chunks (1 MiB) instead.
inline constexpr std::size_t snapshot_piece_bytes = std::size_t{8} << 20;
// A snapshot's entries under heap_limit that add up to this many bytes or more are packed into
// kept buffers of heap_limit bytes (reused without faults); less stays on the heap, for which a
// buffer would map heap_limit bytes.
inline constexpr std::size_t packed_bytes = std::size_t{1} << 20;

// adam::update (src/training/adam.cpp).
// An update of this many bytes of trained parameters or more runs on several threads: the
// pool's wake-up against a part of an update that touches seven times these bytes.
inline constexpr std::size_t parallel_update_bytes = std::size_t{1} << 20;
// The ranges a threaded update is cut in: about this many a thread, so that the threads end
// together, each of this size at least (a range's bookkeeping) and at most (the time the other
// threads may wait for the last one). A leaf no larger is one range: the threads then work on
// different leaves, and make different leaves' copies for a pending background save.
inline constexpr std::size_t update_ranges_per_thread = 4;
inline constexpr std::size_t min_update_range_bytes = std::size_t{256} << 10;
inline constexpr std::size_t max_update_range_bytes = std::size_t{16} << 20;

// ckpt::mpi (src/mpi/sliced.cpp).
// A rank writes at most this much in one collective write: fewer rounds against the staging
// memory a round takes.
inline constexpr std::size_t round_bytes = std::size_t{64} << 20;

}  // namespace ckpt::detail::tuning

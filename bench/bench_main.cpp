// ckpt_bench: the timed rows of issue 5 (1, 2, 3 and 6) and the digest's cost of issue 6 (7), each
// against a baseline measured side by side in this process, on files in --dir. Prints RESULT lines
// (see common.hpp) on stdout and the samples on stderr. Usage (bench/run.sh passes these):
//
//   ckpt_bench --dir=DIR [--rows=1,2,2k,3,6,7] [--tensors=64] [--rows-per=2048] [--cols=2048]
//              [--reps=7] [--io-reps=5] [--small=100000] [--train-batch=64]
//              [--diag-reps=3] [--train-intervals=5] [--train-min-steps=10] [--train-fit=3]
//              [--train-steps=N (fixes N instead of train-fit x write time / step time)]

#include "common.hpp"

#include <ckpt/detail/transpose.hpp>
#include <ckpt/manager.hpp>

#include <boost/json.hpp>

// The digest's hash, as src/file.cpp reaches it (runtime-dispatched on x86).
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include <malloc.h>
#include <sys/mman.h>

#include <cmath>
#include <functional>
#include <optional>

namespace {

using namespace bench;

struct config {
  fs::path dir;
  long tensors = 64, rows = 2048, cols = 2048;
  long reps = 7, io_reps = 5, diag_reps = 3;
  long small = 100000;
  long train_batch = 64, train_intervals = 5, train_min_steps = 10, train_steps = 0;
  double train_fit = 3.0;
  [[nodiscard]] double gib() const {
    return static_cast<double>(tensors * rows * cols) * 4.0 / (1024.0 * 1024.0 * 1024.0);
  }
  [[nodiscard]] std::string size_label() const {
    char text[96];
    std::snprintf(text, sizeof text, "%.3g GiB F32, %ld x (%ldx%ld)", gib(), tensors, rows, cols);
    return text;
  }
};

struct layout_entry {
  std::string name;
  std::uint64_t begin = 0, end = 0;
};

// The entries of a header block (8-byte length + JSON), in file order; parsed here with
// Boost.JSON's DOM, independently of ckpt's reader.
std::vector<layout_entry> layout_of(const std::string& block) {
  const boost::json::object header = boost::json::parse(std::string_view(block).substr(8)).as_object();
  std::vector<layout_entry> out;
  for (const auto& [key, value] : header) {
    if (key == "__metadata__") continue;
    const auto& offsets = value.as_object().at("data_offsets").as_array();
    out.push_back({std::string(key), static_cast<std::uint64_t>(offsets[0].to_number<std::int64_t>()),
                   static_cast<std::uint64_t>(offsets[1].to_number<std::int64_t>())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  return out;
}

// "model.layers.17" -> 17
std::size_t layer_index(const std::string& name) {
  return static_cast<std::size_t>(std::stol(name.substr(name.rfind('.') + 1)));
}

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
}

// Runs the variants once per repetition, rotating which goes first, so that drift in the
// machine's load hits them alike.
template <class... F>
void rotated(long reps, F&... variant) {
  std::vector<std::function<void()>> fs{std::function<void()>(variant)...};
  for (long rep = 0; rep < reps; ++rep)
    for (std::size_t i = 0; i < fs.size(); ++i) fs[(i + static_cast<std::size_t>(rep)) % fs.size()]();
}

// --- Row 1: save of 1 GiB --------------------------------------------------------------------------

// The background write time of save_async, measured by row 1 for row 6's choice of N.
std::optional<double> async_write_seconds;

void row1(const config& c, const row_model& m) {
  log("== row 1: save " + c.size_label());
  const fs::path stream = c.dir / "r1_stream.safetensors", snapshot = c.dir / "r1_snapshot.safetensors",
                 plain = c.dir / "r1_plain.safetensors", plain_tmp = c.dir / ".r1_plain.safetensors.tmp";
  // The file ckpt writes, to take the exact bytes the baseline writes: the same header, then the
  // leaves in the same order.
  ckpt::save(stream, {{m, "model"}});
  const std::string header = read_header_block(stream);
  std::vector<std::pair<const float*, std::size_t>> pieces;
  for (const auto& e : layout_of(header))
    pieces.emplace_back(m.layers.at(layer_index(e.name)).data(), e.end - e.begin);
  remove_quietly(stream);

  series s_plain{"plain write+fsync+rename"}, s_stream{"ckpt::save(sections) (live)"},
      s_snapshot{"ckpt::save(of_params) (snapshot)"};
  // The baseline: the same bytes with write, then fsync, close and rename; `durable` adds the
  // folder's fsync, which ckpt issues (and the baseline of the target does not) so that the
  // rename itself survives a power loss.
  const auto write_plain = [&](bool durable) {
    const int fd = ::open(plain_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("open");
    write_all(fd, header.data(), header.size());
    for (const auto& [data, size] : pieces) write_all(fd, data, size);
    if (::fsync(fd) != 0) die("fsync");
    if (::close(fd) != 0) die("close");
    if (::rename(plain_tmp.c_str(), plain.c_str()) != 0) die("rename");
    if (!durable) return;
    const int dir = ::open(c.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0 || ::fsync(dir) != 0) die("fsync folder");
    ::close(dir);
  };
  series s_plain_durable{"plain write+fsync+rename+fsync(folder)"};
  auto plain_once = [&] {
    remove_quietly(plain);
    s_plain.add(measure([&] { write_plain(false); }));
  };
  auto plain_durable_once = [&] {
    remove_quietly(plain);
    s_plain_durable.add(measure([&] { write_plain(true); }));
  };
  auto stream_once = [&] {
    remove_quietly(stream);
    s_stream.add(measure([&] { ckpt::save(stream, {{m, "model"}}); }));
  };
  auto snapshot_once = [&] {
    remove_quietly(snapshot);
    s_snapshot.add(measure([&] { ckpt::save(snapshot, ckpt::of_params(m, "model")); }));
  };
  // The same shapes in Eigen's default column-major storage, which the file's C order reorders.
  const col_model mc = make_col_model(c.tensors, c.rows, c.cols);
  const fs::path col_stream = c.dir / "r1_col_stream.safetensors", col_snapshot = c.dir / "r1_col_snapshot.safetensors";
  series s_col_stream{"ckpt::save(sections) (live), column-major"}, s_col_snapshot{"ckpt::save(of_params), column-major"};
  auto col_once = [&] {
    remove_quietly(col_stream);
    s_col_stream.add(measure([&] { ckpt::save(col_stream, {{mc, "model"}}); }));
    remove_quietly(col_snapshot);
    s_col_snapshot.add(measure([&] { ckpt::save(col_snapshot, ckpt::of_params(mc, "model")); }));
  };
  // Row 6's first part rides along: checkpoint_manager::save_async of the same state, whose call
  // (the snapshot, then starting the write) is timed apart from the write it starts. Two ways:
  // the sections overload, which snapshots into the manager's arena (buffers reused from the
  // previous save), and a fresh snapshot by of_params.
  const fs::path folder = c.dir / "r1_manager";
  ckpt::checkpoint_manager manager(folder, {.max_to_keep = 1});
  std::int64_t step = 0;
  series s_arena{"save_async(sections) call (arena snapshot)"}, s_live{"manager.save(sections) (live, sync)"},
      s_call{"of_params + save_async call"}, s_of_params{"of_params alone (the snapshot)"},
      s_bare{"save_async call alone, snapshot prebuilt"}, s_total{"save_async(sections) until wait() returns"};
  auto arena_once = [&] {
    const double t0 = now_s();
    s_arena.add(measure([&] { manager.save_async(++step, {{m, "model"}}); }));
    manager.wait();
    s_total.seconds.push_back(now_s() - t0);
    s_total.extra_mib.push_back(0);
  };
  auto live_once = [&] { s_live.add(measure([&] { manager.save(++step, {{m, "model"}}); })); };
  auto fresh_once = [&] {
    std::optional<ckpt::checkpoint> t;
    s_of_params.add(measure([&] { t = ckpt::of_params(m, "model"); }));
    s_bare.add(measure([&] { manager.save_async(++step, {*t}); }));
    t.reset();  // the background write holds its own reference
    s_call.seconds.push_back(s_of_params.seconds.back() + s_bare.seconds.back());
    s_call.extra_mib.push_back(s_of_params.extra_mib.back());
    manager.wait();
  };
  // The arena's first snapshot allocates; the rows time the steady state that follows.
  manager.save_async(++step, {{m, "model"}});
  manager.wait();
  rotated(c.io_reps, plain_once, stream_once, snapshot_once, arena_once, live_once, fresh_once, plain_durable_once,
          col_once);
  if (fs::file_size(plain) != fs::file_size(stream) || fs::file_size(plain) != fs::file_size(snapshot))
    throw std::runtime_error("row 1: the files differ in size");
  for (const auto* s : {&s_plain, &s_plain_durable, &s_stream, &s_snapshot, &s_arena, &s_live, &s_call, &s_of_params, &s_bare,
                         &s_total, &s_col_stream, &s_col_snapshot})
    log("  " + s->name + ": " + s->spread());
  async_write_seconds = std::max(s_total.med() - s_arena.med(), 0.0);
  log("  plain write throughput: " + std::to_string(c.gib() / s_plain.med()) + " GiB/s");
  ratio_result("1", "save " + c.size_label() + ", save(sections) (live, streaming) vs write+fsync+rename",
               s_stream, s_plain, 1.10, "+" + fmt_mib(s_stream.peak()) + " (base +" + fmt_mib(s_plain.peak()) + ")");
  ratio_result("1.d", "diagnostic: save(sections) vs write+fsync+rename+fsync(folder), the calls ckpt makes for durability",
               s_stream, s_plain_durable, 0, "-");
  ratio_result("1", "save, ckpt::save(of_params(...)) (snapshot incl. copy) vs the same baseline", s_snapshot,
               s_plain, 0, "+" + fmt_mib(s_snapshot.peak()));
  ratio_result("1", "save(sections) of column-major leaves (MatrixXf, reordered to C order) vs the same of row-major leaves",
               s_col_stream, s_stream, 1.6, "+" + fmt_mib(s_col_stream.peak()));
  ratio_result("1", "save(of_params(...)) of column-major leaves vs write+fsync+rename of row-major ones", s_col_snapshot,
               s_plain, 0, "+" + fmt_mib(s_col_snapshot.peak()));
  ratio_result("6", "checkpoint_manager::save_async(step, {{params, \"model\"}}) call (snapshot into the reused arena "
               "+ starting the write) vs the synchronous manager.save(step, {{params, \"model\"}}) (live, no snapshot)",
               s_arena, s_live, 0.15, "+" + fmt_mib(s_arena.peak()) + " (sync +" + fmt_mib(s_live.peak()) + ")");
  ratio_result("6", "the same save_async call vs the synchronous save(of_params(...)) (snapshot) of row 1", s_arena,
               s_snapshot, 0.15, "-");
  ratio_result("6.d", "diagnostic: save_async(step, of_params(...)) call (a fresh snapshot every time) vs the same "
               "live sync save", s_call, s_live, 0, "+" + fmt_mib(s_call.peak()));
  ratio_result("6.d", "diagnostic: the save_async call alone (snapshot prebuilt) vs the same live sync save", s_bare,
               s_live, 0, "-");
  for (const fs::path& p : {stream, snapshot, plain, col_stream, col_snapshot}) remove_quietly(p);
  std::error_code ec;
  fs::remove_all(folder, ec);
}

// --- Row 2: load + to_params -----------------------------------------------------------------------

// The baseline of row 2: the entries' bytes pread into the leaves of `into`.
void pread_once_into(const fs::path& path, const std::vector<layout_entry>& layout, std::uint64_t data_start,
                     row_model& into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open");
  for (const auto& e : layout)
    pread_all(fd, into.layers[layer_index(e.name)].data(), e.end - e.begin, data_start + e.begin);
  ::close(fd);
}

// Times `make()`, which returns a new model, into `s`; the model is destroyed after the timing
// (its first matrix read, so that the call is not optimized away), and the heap trimmed: glibc
// gives the freed model back to the kernel at the next free of 64 KiB or more, which would
// charge the next timed call (a load of 4,096 matrices of 64 KiB measured 2.5x its time in a
// quiet loop when a free of its own gave back the 256 MiB the model before it had freed).
template <class Make>
void time_new_model(series& s, float& checksum, const Make& make) {
  std::optional<decltype(make())> out;
  s.add(measure([&] { out = make(); }));
  checksum += out->layers[0](1, 2);
  out.reset();
  ::malloc_trim(0);
}

// What a user writes without ckpt when the loader returns a new model (issue 15 item 3):
// allocate the matrices, pread into them.
row_model allocating_load(const config& c, const fs::path& path, const std::vector<layout_entry>& layout,
                          std::uint64_t data_start) {
  row_model out = make_row_model(c.tensors, c.rows, c.cols, false);
  pread_once_into(path, layout, data_start, out);
  return out;
}

// Drops the (clean) pages of `path` from the page cache, so that the next read goes to the disk.
void drop_from_page_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open");
  if (::fdatasync(fd) != 0) die("fdatasync");
  if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) die("posix_fadvise");
  ::close(fd);
}

void row2(const config& c, const row_model& m) {
  log("== row 2: load + to_params " + c.size_label() + " (page cache warm)");
  const fs::path path = c.dir / "r2.safetensors";
  ckpt::save(path, {{m, "model"}});
  const std::vector<layout_entry> layout = layout_of(read_header_block(path));
  const std::uint64_t data_start = read_header_block(path).size();

  row_model buffers = make_row_model(c.tensors, c.rows, c.cols, true);  // preallocated, touched
  col_model col_like = make_col_model(c.tensors, c.rows, c.cols, true);
  const row_model& row_like = m;

  series s_pread{"pread into preallocated"}, s_row{"load+to_params row-major"},
      s_col{"load+to_params column-major"}, s_row_in_place{"load+read_params row-major"},
      s_col_in_place{"load+read_params column-major"}, s_template{"copy of the template (P out = like)"},
      s_mmap{"mmap + memcpy into preallocated"}, s_memcpy{"memcpy in memory, preallocated"},
      s_transpose{"ckpt transpose kernel in memory, preallocated"},
      s_alloc{"hand-written loader: allocate the matrices, pread into them"};
  float checksum = 0;
  auto pread_once = [&] {
    s_pread.add(measure([&] { pread_once_into(path, layout, data_start, buffers); }));
    checksum += buffers.layers[0](1, 2);
  };
  auto alloc_once = [&] {
    time_new_model(s_alloc, checksum, [&] { return allocating_load(c, path, layout, data_start); });
  };
  auto row_once = [&] {
    time_new_model(s_row, checksum, [&] { return ckpt::to_params(ckpt::load(path), row_like, {.prefix = "model"}); });
  };
  auto col_once = [&] {
    time_new_model(s_col, checksum, [&] { return ckpt::to_params(ckpt::load(path), col_like, {.prefix = "model"}); });
  };
  // read_params fills the preallocated (touched) leaves in place: restoring a live model.
  auto row_in_place_once = [&] {
    s_row_in_place.add(measure([&] { ckpt::read_params(ckpt::load(path), buffers, {.prefix = "model"}); }));
    checksum += buffers.layers[0](1, 2);
  };
  auto col_in_place_once = [&] {
    s_col_in_place.add(measure([&] { ckpt::read_params(ckpt::load(path), col_like, {.prefix = "model"}); }));
    checksum += col_like.layers[0](1, 2);
  };
  // Diagnostics: the parts of the row-major path, each alone, and what fresh memory costs here.
  auto template_once = [&] { time_new_model(s_template, checksum, [&] { return row_like; }); };
  auto mmap_once = [&] {
    s_mmap.add(measure([&] {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      const std::size_t size = fs::file_size(path);
      void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (base == MAP_FAILED) die("mmap");
      for (const auto& e : layout)
        std::memcpy(buffers.layers[layer_index(e.name)].data(),
                    static_cast<const char*>(base) + data_start + e.begin, e.end - e.begin);
      ::munmap(base, size);
      ::close(fd);
    }));
  };
  auto memcpy_once = [&] {
    s_memcpy.add(measure([&] {
      for (std::size_t i = 0; i < buffers.layers.size(); ++i)
        std::memcpy(buffers.layers[i].data(), row_like.layers[i].data(),
                    static_cast<std::size_t>(row_like.layers[i].size()) * sizeof(float));
    }));
  };
  auto transpose_once = [&] {
    s_transpose.add(measure([&] {
      for (std::size_t i = 0; i < col_like.layers.size(); ++i)
        ckpt::detail::transpose(reinterpret_cast<const std::byte*>(row_like.layers[i].data()),
                                reinterpret_cast<std::byte*>(col_like.layers[i].data()),
                                static_cast<std::size_t>(c.rows), static_cast<std::size_t>(c.cols), sizeof(float));
    }));
  };
  pread_once();  // warm the page cache (the file was just written: it mostly is already)
  s_pread = series(s_pread.name);
  rotated(c.io_reps, pread_once, row_in_place_once, col_in_place_once, row_once, col_once, alloc_once);
  rotated(c.diag_reps, template_once, mmap_once, memcpy_once, transpose_once);
  // Cold: the file's pages dropped from the page cache before each call (a resume after a
  // reboot, or of a checkpoint written long ago), ckpt against the same pread.
  series s_pread_cold{"pread, cold"}, s_row_cold{"load+read_params row-major, cold"},
      s_col_cold{"load+read_params column-major, cold"};
  const auto cold = [&](series& s, auto&& call) {
    drop_from_page_cache(path);
    s.add(measure(call));
  };
  auto pread_cold_once = [&] { cold(s_pread_cold, [&] { pread_once_into(path, layout, data_start, buffers); }); };
  auto row_cold_once = [&] {
    cold(s_row_cold, [&] { ckpt::read_params(ckpt::load(path), buffers, {.prefix = "model"}); });
  };
  auto col_cold_once = [&] {
    cold(s_col_cold, [&] { ckpt::read_params(ckpt::load(path), col_like, {.prefix = "model"}); });
  };
  rotated(c.io_reps, pread_cold_once, row_cold_once, col_cold_once);
  log("  (checksum " + std::to_string(checksum) + ")");
  for (const auto* s : {&s_pread, &s_row_in_place, &s_col_in_place, &s_row, &s_col, &s_alloc, &s_template, &s_mmap,
                        &s_memcpy, &s_transpose, &s_pread_cold, &s_row_cold, &s_col_cold})
    log("  " + s->name + ": " + s->spread());
  ratio_result("2", "load + read_params into row-major leaves vs pread into preallocated buffers", s_row_in_place,
               s_pread, 1.15, "+" + fmt_mib(s_row_in_place.peak()));
  ratio_result("2", "load + read_params into column-major leaves (MatrixXf) vs the same pread", s_col_in_place,
               s_pread, 1.60, "+" + fmt_mib(s_col_in_place.peak()));
  ratio_result("2", "load + to_params into row-major leaves vs pread into preallocated buffers", s_row, s_pread,
               1.15, "+" + fmt_mib(s_row.peak()));
  ratio_result("2", "load + to_params into column-major leaves (MatrixXf) vs the same pread", s_col, s_pread,
               1.60, "+" + fmt_mib(s_col.peak()));
  ratio_result("2", "load + to_params into row-major leaves vs a hand-written loader that allocates its matrices and "
               "preads into them", s_row, s_alloc, 1.15, "+" + fmt_mib(s_alloc.peak()) + " (loader)");
  ratio_result("2.c", "cold (file dropped from the page cache): load + read_params into row-major leaves vs pread, cold",
               s_row_cold, s_pread_cold, 0, "+" + fmt_mib(s_row_cold.peak()));
  ratio_result("2.c", "cold: load + read_params into column-major leaves vs the same cold pread", s_col_cold,
               s_pread_cold, 0, "+" + fmt_mib(s_col_cold.peak()));
  ratio_result("2.d", "diagnostic: P out = like (the template copy to_params made before it allocated its leaves) vs pread", s_template,
               s_pread, 0, "+" + fmt_mib(s_template.peak()));
  ratio_result("2.d", "diagnostic: mmap + memcpy into preallocated buffers vs pread", s_mmap, s_pread, 0, "-");
  ratio_result("2.d", "diagnostic: ckpt transpose kernel vs memcpy, both in memory, preallocated", s_transpose,
               s_memcpy, 0, "-");
  remove_quietly(path);
}

// --- Row 3: 100,000 small tensors --------------------------------------------------------------------

ckpt::checkpoint small_tensors(long count) {
  static constexpr const char* parts[] = {"q", "k", "v", "o"};
  std::vector<ckpt::checkpoint::entry> entries;
  entries.reserve(static_cast<std::size_t>(count));
  std::vector<float> values(16);
  for (long i = 0; i < count; ++i) {
    const long block = i / 8, part = (i / 2) % 4;
    const bool weight = i % 2 == 0;
    fill(values.data(), values.size(), static_cast<std::uint32_t>(i));
    const ckpt::dims shape = weight ? ckpt::dims{4, 4} : ckpt::dims{4};
    const std::size_t n = weight ? 16 : 4;
    entries.emplace_back("blocks." + std::to_string(block) + ".attn." + parts[part] + (weight ? ".w" : ".b"),
                         ckpt::tensor::copy_of(ckpt::dtype::f32, shape,
                                               std::as_bytes(std::span(values.data(), n))));
  }
  return ckpt::checkpoint(std::move(entries));
}

void row3(const config& c) {
  log("== row 3: " + std::to_string(c.small) + " small tensors");
  const fs::path path = c.dir / "r3.safetensors";
  const ckpt::checkpoint t = small_tensors(c.small);
  ckpt::save(path, t);
  const std::string block = read_header_block(path);
  const std::string_view json = std::string_view(block).substr(8);
  log("  file " + std::to_string(fs::file_size(path)) + " bytes, header " + std::to_string(json.size()) + " bytes");

  series s_json{"boost::json::parse(header)"}, s_load{"ckpt::load"}, s_save{"ckpt::save"};
  std::size_t seen = 0;
  auto json_once = [&] {
    std::optional<boost::json::value> v;
    s_json.add(measure([&] { v = boost::json::parse(json); }));
    seen += v->as_object().size();
  };
  auto load_once = [&] {
    std::optional<ckpt::checkpoint> loaded;
    s_load.add(measure([&] { loaded = ckpt::load(path); }));
    seen += loaded->size();
  };
  auto save_once = [&] {
    remove_quietly(path);
    s_save.add(measure([&] { ckpt::save(path, t); }));
  };
  rotated(1, json_once, load_once);  // warm-up
  s_json = series(s_json.name), s_load = series(s_load.name);
  rotated(c.reps, json_once, load_once, save_once);
  log("  (entries seen " + std::to_string(seen) + ")");
  for (const auto* s : {&s_json, &s_load, &s_save}) log("  " + s->name + ": " + s->spread());
  const std::string n = std::to_string(c.small);
  ratio_result("3", "load of " + n + " small tensors vs boost::json::parse of its header alone", s_load, s_json,
               2.0, "+" + fmt_mib(s_load.peak()) + " (json +" + fmt_mib(s_json.peak()) + ")");
  ratio_result("3", "save (incl. fsync+rename) of the same vs its load", s_save, s_load, 3.0,
               "+" + fmt_mib(s_save.peak()));
  remove_quietly(path);
}

// --- Row 6: save_async -------------------------------------------------------------------------------

void row6(const config& c, row_model& m) {
  log("== row 6: a training loop with checkpoint_manager::save_async of " + c.size_label());
  const fs::path folder = c.dir / "r6";
  std::int64_t step = 0;
  if (!async_write_seconds) {
    // Row 1 did not run: time one background write here.
    ckpt::checkpoint_manager manager(folder, {.max_to_keep = 1});
    manager.save_async(++step, {{m, "model"}});
    const double t0 = now_s();
    manager.wait();
    async_write_seconds = now_s() - t0;
  }

  // The toy training loop: each step one matmul forward and one rank-B update of one layer.
  const row_matrix x = [&] {
    row_matrix r(c.cols, c.train_batch);
    fill(r.data(), static_cast<std::size_t>(r.size()), 77);
    return r;
  }();
  long s = 0;
  auto train_step = [&] {
    row_matrix& w = m.layers[static_cast<std::size_t>(s++ % c.tensors)];
    const row_matrix y = w * x;
    w.noalias() -= 1e-6f * (y * x.transpose());
  };
  std::vector<double> probe;
  for (int i = 0; i < 7; ++i) {
    const double t0 = now_s();
    train_step();
    probe.push_back(now_s() - t0);
  }
  const double step_time = median(probe);
  const double write_time = *async_write_seconds;
  const long n = c.train_steps > 0 ? c.train_steps
                 : std::max(c.train_min_steps, static_cast<long>(std::ceil(c.train_fit * write_time / step_time)));
  log("  train step " + fmt_time(step_time) + ", background write " + fmt_time(write_time) + " -> save every " +
      std::to_string(n) + " steps");

  series s_nosave{"intervals without saves"}, s_save{"intervals with save_async at their start"},
      s_calls{"save_async(sections) calls in the loop"};
  double final_wait = 0;
  {
    ckpt::checkpoint_manager manager(folder, {.max_to_keep = 1});
    // The arena's first snapshot allocates (a trainer pays it once); the loop runs on the reuse.
    manager.save_async(++step, {{m, "model"}});
    manager.wait();
    auto interval = [&](bool save) {
      const double t0 = now_s();
      if (save) {
        manager.save_async(++step, {{m, "model"}});
        s_calls.seconds.push_back(now_s() - t0);
        s_calls.extra_mib.push_back(0);
      }
      for (long i = 0; i < n; ++i) train_step();
      (save ? s_save : s_nosave).seconds.push_back(now_s() - t0);
    };
    const long k = c.train_intervals;
    for (long i = 0; i < (k + 1) / 2; ++i) interval(false);
    for (long i = 0; i < k; ++i) interval(true);
    const double t0 = now_s();
    manager.wait();
    final_wait = now_s() - t0;
    for (long i = 0; i < k / 2; ++i) interval(false);
  }
  s_nosave.extra_mib.push_back(0);
  s_save.extra_mib.push_back(0);
  for (const auto* x_ : {&s_nosave, &s_save, &s_calls}) log("  " + x_->name + ": " + x_->spread());
  log("  wait() after the last interval: " + fmt_time(final_wait));
  ratio_result("6", "training loop, save_async every " + std::to_string(n) + " steps (" + fmt_time(step_time) +
                        "/step) vs never saving; time per " + std::to_string(n) + " steps",
               s_save, s_nosave, 1.05, "-");
  std::error_code ec;
  fs::remove_all(folder, ec);
}

// --- Row 2k: the Kaun-compatible load alone against an allocating loader ------------------------

// Row 2's to_params row shares its rotation with nine other series that free and allocate GiBs,
// and on a VM that hands freed memory back to its host, which series gets the pages that are
// costly to touch again decides that row (CHANGELOG.md, "Performance history", change 12). This row
// rotates only the two calls issue 15 item 3 compares, both of which allocate their matrices.
void row2k(const config& c, const row_model& m) {
  log("== row 2k: load + to_params vs a hand-written allocating loader, alone, " + c.size_label() +
      " (page cache warm)");
  const fs::path path = c.dir / "r2k.safetensors";
  ckpt::save(path, {{m, "model"}});
  const std::vector<layout_entry> layout = layout_of(read_header_block(path));
  const std::uint64_t data_start = read_header_block(path).size();
  series s_alloc{"hand-written loader: allocate the matrices, pread into them"}, s_row{"load+to_params row-major"};
  float checksum = 0;
  auto alloc_once = [&] {
    time_new_model(s_alloc, checksum, [&] { return allocating_load(c, path, layout, data_start); });
  };
  auto row_once = [&] {
    time_new_model(s_row, checksum, [&] { return ckpt::to_params(ckpt::load(path), m, {.prefix = "model"}); });
  };
  rotated(c.reps, alloc_once, row_once);
  log("  (checksum " + std::to_string(checksum) + ")");
  for (const auto* s : {&s_alloc, &s_row}) log("  " + s->name + ": " + s->spread());
  ratio_result("2k", "load + to_params into row-major leaves vs a hand-written loader that allocates its matrices and "
               "preads into them, the two alone", s_row, s_alloc, 1.15, "+" + fmt_mib(s_row.peak()) + " (loader +" +
               fmt_mib(s_alloc.peak()) + ")");
  remove_quietly(path);
}

// --- Row 7: what the digest costs ------------------------------------------------------------------

void row7(const config& c, const row_model& m) {
  log("== row 7: the data digest (XXH3-64) on " + c.size_label() + " (page cache warm for loads)");
  const fs::path plain = c.dir / "r7_plain.safetensors", hashed = c.dir / "r7_digest.safetensors";
  series s_save{"save(sections)"}, s_save_digest{"save(sections), digest on"},
      s_read_skip{"load(verify_digest = false) + read_params"}, s_read_verify{"load (verifying) + read_params"},
      s_to_skip{"load(verify_digest = false) + to_params"}, s_to_verify{"load (verifying) + to_params"},
      s_hash{"XXH3-64 of the data section, through a fresh mapping"};
  row_model buffers = make_row_model(c.tensors, c.rows, c.cols, true);  // preallocated, touched
  // Column-major leaves read the file in bands of rows, each a part of a 1 MiB chunk: a verified
  // load checks the whole chunk once and keeps it for the next bands (mapped_file).
  col_model col_buffers = make_col_model(c.tensors, c.rows, c.cols, true);
  series s_col_skip{"load(verify_digest = false) + read_params, column-major"},
      s_col_verify{"load (verifying) + read_params, column-major"};
  float checksum = 0;
  auto save_once = [&] {
    remove_quietly(plain);
    s_save.add(measure([&] { ckpt::save(plain, {{m, "model"}}); }));
  };
  auto save_digest_once = [&] {
    remove_quietly(hashed);
    s_save_digest.add(measure([&] { ckpt::save(hashed, {{m, "model"}}, {}, {.digest = true}); }));
  };
  // What the digest adds to a save, without the noise of the disk: XXH3-64 of the same bytes in
  // memory, through the streaming state the writer uses.
  series s_hash_memory{"XXH3-64 of the parameters in memory (streaming)"};
  auto hash_memory_once = [&] {
    s_hash_memory.add(measure([&] {
      XXH3_state_t* state = XXH3_createState();
      XXH3_64bits_reset(state);
      for (const auto& layer : m.layers)
        XXH3_64bits_update(state, layer.data(), static_cast<std::size_t>(layer.size()) * sizeof(float));
      checksum += static_cast<float>(XXH3_64bits_digest(state) & 1);
      XXH3_freeState(state);
    }));
  };
  rotated(c.io_reps, save_once, save_digest_once, hash_memory_once);
  if (fs::file_size(plain) - read_header_block(plain).size() != fs::file_size(hashed) - read_header_block(hashed).size())
    throw std::runtime_error("row 7: the data sections differ in size");
  // Both loads read the file with the digest; only the verification differs.
  auto read_skip_once = [&] {
    s_read_skip.add(measure([&] {
      ckpt::read_params(ckpt::load(hashed, {.verify_digest = false}), buffers, {.prefix = "model"});
    }));
    checksum += buffers.layers[0](1, 2);
  };
  auto read_verify_once = [&] {
    s_read_verify.add(measure([&] { ckpt::read_params(ckpt::load(hashed), buffers, {.prefix = "model"}); }));
    checksum += buffers.layers[0](1, 2);
  };
  auto to_skip_once = [&] {
    time_new_model(s_to_skip, checksum, [&] {
      return ckpt::to_params(ckpt::load(hashed, {.verify_digest = false}), m, {.prefix = "model"});
    });
  };
  auto to_verify_once = [&] {
    time_new_model(s_to_verify, checksum, [&] { return ckpt::to_params(ckpt::load(hashed), m, {.prefix = "model"}); });
  };
  auto col_skip_once = [&] {
    s_col_skip.add(measure([&] {
      ckpt::read_params(ckpt::load(hashed, {.verify_digest = false}), col_buffers, {.prefix = "model"});
    }));
    checksum += col_buffers.layers[0](1, 2);
  };
  auto col_verify_once = [&] {
    s_col_verify.add(measure([&] { ckpt::read_params(ckpt::load(hashed), col_buffers, {.prefix = "model"}); }));
    checksum += col_buffers.layers[0](1, 2);
  };
  // The verification alone: load() with the digest checked, minus nothing else (only the header
  // is parsed besides).
  auto hash_once = [&] { s_hash.add(measure([&] { checksum += static_cast<float>(ckpt::load(hashed).size()); })); };
  read_skip_once();  // warm the page cache
  s_read_skip = series(s_read_skip.name);
  rotated(c.io_reps, read_skip_once, read_verify_once, hash_once);
  rotated(c.io_reps, to_skip_once, to_verify_once);
  rotated(c.io_reps, col_skip_once, col_verify_once);
  // Cold (a resume after a reboot): the file dropped from the page cache before each call.
  series s_read_skip_cold{"load(verify_digest = false) + read_params, cold"},
      s_read_verify_cold{"load (verifying) + read_params, cold"};
  auto read_skip_cold_once = [&] {
    drop_from_page_cache(hashed);
    s_read_skip_cold.add(measure([&] {
      ckpt::read_params(ckpt::load(hashed, {.verify_digest = false}), buffers, {.prefix = "model"});
    }));
  };
  auto read_verify_cold_once = [&] {
    drop_from_page_cache(hashed);
    s_read_verify_cold.add(measure([&] { ckpt::read_params(ckpt::load(hashed), buffers, {.prefix = "model"}); }));
  };
  rotated(c.io_reps, read_skip_cold_once, read_verify_cold_once);
  log("  (checksum " + std::to_string(checksum) + ")");
  for (const auto* s : {&s_save, &s_save_digest, &s_hash_memory, &s_read_skip, &s_read_verify, &s_to_skip, &s_to_verify,
                        &s_col_skip, &s_col_verify, &s_hash, &s_read_skip_cold, &s_read_verify_cold})
    log("  " + s->name + ": " + s->spread());
  log("  verification throughput: " + std::to_string(c.gib() / s_hash.med()) + " GiB/s");
  ratio_result("7", "save " + c.size_label() + " with the digest vs without (save(sections), live)", s_save_digest,
               s_save, 1.10, "+" + fmt_mib(s_save_digest.peak()) + " (without +" + fmt_mib(s_save.peak()) + ")");
  ratio_result("7.d", "diagnostic: XXH3-64 of the same GiB in memory (the work the digest adds to a save) vs the save without digest",
               s_hash_memory, s_save, 0, "-");
  ratio_result("7", "load (digest verified) + read_params into row-major leaves (in place) vs load(verify_digest = false) + read_params",
               s_read_verify, s_read_skip, 1.10, "+" + fmt_mib(s_read_verify.peak()));
  ratio_result("7", "load (digest verified) + to_params (returns a new struct) vs load(verify_digest = false) + to_params",
               s_to_verify, s_to_skip, 1.10, "+" + fmt_mib(s_to_verify.peak()));
  ratio_result("7", "load (digest verified) + read_params into column-major leaves vs load(verify_digest = false) + read_params",
               s_col_verify, s_col_skip, 0, "+" + fmt_mib(s_col_verify.peak()));
  ratio_result("7.c", "cold (file dropped from the page cache): load (digest verified) + read_params vs "
               "load(verify_digest = false) + read_params, cold",
               s_read_verify_cold, s_read_skip_cold, 0, "+" + fmt_mib(s_read_verify_cold.peak()));
  ratio_result("7.d", "diagnostic: load() alone with verification (maps the file, hashes all of it) vs load(verify_digest = false) + read_params",
               s_hash, s_read_skip, 0, "+" + fmt_mib(s_hash.peak()));
  for (const fs::path& p : {plain, hashed}) remove_quietly(p);
}

}  // namespace

int main(int argc, char** argv) try {
  const args a(argc, argv);
  config c;
  c.dir = a.str("dir", "");
  if (c.dir.empty()) throw std::invalid_argument("--dir=DIR is required");
  fs::create_directories(c.dir);
  c.tensors = a.num("tensors", c.tensors);
  c.rows = a.num("rows-per", c.rows);
  c.cols = a.num("cols", c.cols);
  c.reps = a.num("reps", c.reps);
  c.io_reps = a.num("io-reps", c.io_reps);
  c.diag_reps = a.num("diag-reps", c.diag_reps);
  c.small = a.num("small", c.small);
  c.train_batch = a.num("train-batch", c.train_batch);
  c.train_intervals = a.num("train-intervals", c.train_intervals);
  c.train_min_steps = a.num("train-min-steps", c.train_min_steps);
  c.train_steps = a.num("train-steps", c.train_steps);
  c.train_fit = a.real("train-fit", c.train_fit);
  const std::string rows = "," + a.str("rows", "1,2,2k,3,6,7") + ",";
  auto wants = [&](const char* r) { return rows.find("," + std::string(r) + ",") != std::string::npos; };

  std::optional<row_model> m;
  if (wants("1") || wants("2") || wants("2k") || wants("6") || wants("7")) {
    const double t0 = now_s();
    m = make_row_model(c.tensors, c.rows, c.cols);
    log("made " + c.size_label() + " in " + fmt_time(now_s() - t0));
  }
  if (wants("1")) row1(c, *m);
  if (wants("2")) row2(c, *m);
  if (wants("2k")) row2k(c, *m);
  if (wants("3")) row3(c);
  if (wants("6")) row6(c, *m);
  if (wants("7")) row7(c, *m);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_bench: %s\n", e.what());
  return 1;
}

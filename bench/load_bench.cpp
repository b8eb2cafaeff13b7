// ckpt_bench_load: how fast does ckpt load? Each case times ckpt against a baseline run side by side
// in this process (median of N, rotating order), on files in --dir, and prints one RESULT line per
// figure (common.hpp) on stdout, the samples on stderr. bench/run.sh drives it; `--help` lists the
// cases.
//
//   ckpt_bench_load --dir=DIR [--case=read_params,to_params,...] [--tensors=64] [--rows-per=2048]
//                   [--cols=2048] [--reps=7] [--io-reps=5] [--diag-reps=3] [--small=100000]
//                   [--entries=2560] [--entry-rows=1024] [--entry-cols=1024] [--index=37]

#include "harness.hpp"

#include <ckpt/detail/transpose.hpp>

#include <sys/mman.h>
#include <sys/sysmacros.h>

namespace {

using namespace bench;

// The baseline of the loads: the entries' bytes pread into the leaves of `into`.
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

// What a user writes without ckpt when the loader returns a new model: allocate the matrices,
// pread into them.
row_model allocating_load(const config& c, const fs::path& path, const std::vector<layout_entry>& layout,
                          std::uint64_t data_start) {
  row_model out = make_row_model(c.tensors, c.rows, c.cols, false);
  pread_once_into(path, layout, data_start, out);
  return out;
}

// --- read_params, to_params, cold, parts: 1 GiB loaded in place, into new leaves, cold ----------

void loads(const config& c, const case_list& cases, const row_model& m) {
  const bool in_place = cases("read_params"), fresh = cases("to_params"), cold = cases("cold"),
             parts = cases("parts");
  log("== load " + c.size_label() + " (read_params, to_params, cold, parts)");
  const fs::path path = c.dir / "load.safetensors";
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
  // The parts of the row-major path, each alone, and what fresh memory costs here.
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
  // Warm: the floor runs with whichever cases are asked for (the parts are compared with it too).
  if (in_place || fresh || parts) {
    pread_once();  // warm the page cache (the file was just written: it mostly is already)
    s_pread = series(s_pread.name);
    std::vector<std::function<void()>> warm{pread_once};
    if (in_place) {
      warm.emplace_back(row_in_place_once);
      warm.emplace_back(col_in_place_once);
    }
    if (fresh) {
      warm.emplace_back(row_once);
      warm.emplace_back(col_once);
      warm.emplace_back(alloc_once);
    }
    rotate(c.io_reps, warm);
  }
  if (parts) rotated(c.diag_reps, template_once, mmap_once, memcpy_once, transpose_once);
  // Cold: the file's pages dropped from the page cache before each call (a resume after a
  // reboot, or of a checkpoint written long ago), ckpt against the same pread.
  series s_pread_cold{"pread, cold"}, s_row_cold{"load+read_params row-major, cold"},
      s_col_cold{"load+read_params column-major, cold"};
  const auto timed_cold = [&](series& s, auto&& call) {
    drop_from_page_cache(path);
    s.add(measure(call));
  };
  auto pread_cold_once = [&] { timed_cold(s_pread_cold, [&] { pread_once_into(path, layout, data_start, buffers); }); };
  auto row_cold_once = [&] {
    timed_cold(s_row_cold, [&] { ckpt::read_params(ckpt::load(path), buffers, {.prefix = "model"}); });
  };
  auto col_cold_once = [&] {
    timed_cold(s_col_cold, [&] { ckpt::read_params(ckpt::load(path), col_like, {.prefix = "model"}); });
  };
  if (cold) rotated(c.io_reps, pread_cold_once, row_cold_once, col_cold_once);
  log("  (checksum " + std::to_string(checksum) + ")");
  for (const auto* s : {&s_pread, &s_row_in_place, &s_col_in_place, &s_row, &s_col, &s_alloc, &s_template, &s_mmap,
                        &s_memcpy, &s_transpose, &s_pread_cold, &s_row_cold, &s_col_cold})
    if (!s->seconds.empty()) log("  " + s->name + ": " + s->spread());
  if (in_place) {
    ratio_result("load.read_params.row_major", "load + read_params of " + c.size_label() +
                 " into row-major leaves vs pread into preallocated buffers", s_row_in_place, s_pread, 1.15,
                 "+" + fmt_mib(s_row_in_place.peak()));
    ratio_result("load.read_params.column_major", "load + read_params into column-major leaves (MatrixXf) vs the same pread",
                 s_col_in_place, s_pread, 1.60, "+" + fmt_mib(s_col_in_place.peak()));
  }
  if (fresh) {
    ratio_result("load.to_params.row_major", "load + to_params of " + c.size_label() +
                 " into row-major leaves vs pread into preallocated buffers", s_row, s_pread, 1.15,
                 "+" + fmt_mib(s_row.peak()));
    ratio_result("load.to_params.column_major", "load + to_params into column-major leaves (MatrixXf) vs the same pread",
                 s_col, s_pread, 1.60, "+" + fmt_mib(s_col.peak()));
    ratio_result("load.to_params.row_major_vs_allocating", "load + to_params into row-major leaves vs a hand-written "
                 "loader that allocates its matrices and preads into them", s_row, s_alloc, 1.15,
                 "+" + fmt_mib(s_alloc.peak()) + " (loader)");
  }
  if (cold) {
    ratio_result("load.cold.row_major", "cold (file dropped from the page cache): load + read_params of " + c.size_label() +
                 " into row-major leaves vs pread, cold", s_row_cold, s_pread_cold, 0, "+" + fmt_mib(s_row_cold.peak()));
    ratio_result("load.cold.column_major", "cold: load + read_params into column-major leaves vs the same cold pread",
                 s_col_cold, s_pread_cold, 0, "+" + fmt_mib(s_col_cold.peak()));
  }
  if (parts) {
    ratio_result("load.parts.template_copy", "diagnostic: P out = like (the template copy to_params made before it "
                 "allocated its leaves) vs pread", s_template, s_pread, 0, "+" + fmt_mib(s_template.peak()));
    ratio_result("load.parts.mmap_memcpy", "diagnostic: mmap + memcpy into preallocated buffers vs pread", s_mmap,
                 s_pread, 0, "-");
    ratio_result("load.parts.transpose", "diagnostic: ckpt transpose kernel vs memcpy, both in memory, preallocated",
                 s_transpose, s_memcpy, 0, "-");
  }
  remove_quietly(path);
}

// --- allocating: to_params alone against a loader that allocates -----------------------------------

// to_params shares the rotation of `loads` with other variants that free and allocate GiBs, and on
// a VM that hands freed memory back to its host, which variant gets the pages that are costly to
// touch again decides that figure (CHANGELOG.md, "Performance history", change 12). This case
// rotates only the two calls that both allocate their matrices.
void allocating(const config& c, const row_model& m) {
  log("== allocating: load + to_params vs a hand-written allocating loader, alone, " + c.size_label() +
      " (page cache warm)");
  const fs::path path = c.dir / "load_allocating.safetensors";
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
  ratio_result("load.allocating", "load + to_params of " + c.size_label() + " into row-major leaves vs a hand-written "
               "loader that allocates its matrices and preads into them, the two alone", s_row, s_alloc, 1.15,
               "+" + fmt_mib(s_row.peak()) + " (loader +" + fmt_mib(s_alloc.peak()) + ")");
  remove_quietly(path);
}

// --- verify, verify_cold: what checking the digest adds to a load ----------------------------------

void verified_loads(const config& c, const case_list& cases, const row_model& m) {
  log("== verify: loads of a file with the data digest (XXH3-64), " + c.size_label());
  const fs::path hashed = c.dir / "load_digest.safetensors";
  ckpt::save(hashed, {{m, "model"}}, {}, {.digest = true});
  series s_read_skip{"load(verify_digest = false) + read_params"}, s_read_verify{"load (verifying) + read_params"},
      s_to_skip{"load(verify_digest = false) + to_params"}, s_to_verify{"load (verifying) + to_params"},
      s_hash{"load() alone, verifying"};
  row_model buffers = make_row_model(c.tensors, c.rows, c.cols, true);  // preallocated, touched
  // Column-major leaves read the file in bands of rows, each a part of a 1 MiB chunk: a verified
  // load checks the whole chunk once and keeps it for the next bands (mapped_file).
  col_model col_buffers = make_col_model(c.tensors, c.rows, c.cols, true);
  series s_col_skip{"load(verify_digest = false) + read_params, column-major"},
      s_col_verify{"load (verifying) + read_params, column-major"};
  float checksum = 0;
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
  if (cases("verify")) {
    read_skip_once();  // warm the page cache
    s_read_skip = series(s_read_skip.name);
    rotated(c.io_reps, read_skip_once, read_verify_once, hash_once);
    rotated(c.io_reps, to_skip_once, to_verify_once);
    rotated(c.io_reps, col_skip_once, col_verify_once);
  }
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
  if (cases("verify_cold")) rotated(c.io_reps, read_skip_cold_once, read_verify_cold_once);
  log("  (checksum " + std::to_string(checksum) + ")");
  for (const auto* s : {&s_read_skip, &s_read_verify, &s_to_skip, &s_to_verify, &s_col_skip, &s_col_verify, &s_hash,
                        &s_read_skip_cold, &s_read_verify_cold})
    if (!s->seconds.empty()) log("  " + s->name + ": " + s->spread());
  if (cases("verify")) {
    log("  verification throughput: " + std::to_string(c.gib() / s_hash.med()) + " GiB/s");
    ratio_result("load.verify.read_params", "load (digest verified) + read_params of " + c.size_label() +
                 " into row-major leaves (in place) vs load(verify_digest = false) + read_params",
                 s_read_verify, s_read_skip, 1.10, "+" + fmt_mib(s_read_verify.peak()));
    ratio_result("load.verify.to_params", "load (digest verified) + to_params (returns a new struct) vs "
                 "load(verify_digest = false) + to_params", s_to_verify, s_to_skip, 1.10, "+" + fmt_mib(s_to_verify.peak()));
    ratio_result("load.verify.column_major", "load (digest verified) + read_params into column-major leaves vs "
                 "load(verify_digest = false) + read_params", s_col_verify, s_col_skip, 0, "+" + fmt_mib(s_col_verify.peak()));
    ratio_result("load.verify.load_alone", "diagnostic: load() alone with verification (maps the file, hashes all of "
                 "it) vs load(verify_digest = false) + read_params", s_hash, s_read_skip, 0, "+" + fmt_mib(s_hash.peak()));
  }
  if (cases("verify_cold"))
    ratio_result("load.verify_cold.read_params", "cold (file dropped from the page cache): load (digest verified) + "
                 "read_params of " + c.size_label() + " vs load(verify_digest = false) + read_params, cold",
                 s_read_verify_cold, s_read_skip_cold, 0, "+" + fmt_mib(s_read_verify_cold.peak()));
  remove_quietly(hashed);
}

// --- small: 100,000 small tensors -------------------------------------------------------------------

void small(const config& c) {
  log("== small: load of " + std::to_string(c.small) + " small tensors");
  const fs::path path = c.dir / "load_small.safetensors";
  ckpt::save(path, small_tensors(c.small));
  const std::string block = read_header_block(path);
  const std::string_view json = std::string_view(block).substr(8);
  log("  file " + std::to_string(fs::file_size(path)) + " bytes, header " + std::to_string(json.size()) + " bytes");

  series s_json{"boost::json::parse(header)"}, s_load{"ckpt::load"};
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
  rotated(1, json_once, load_once);  // warm-up
  s_json = series(s_json.name), s_load = series(s_load.name);
  rotated(c.reps, json_once, load_once);
  log("  (entries seen " + std::to_string(seen) + ")");
  for (const auto* s : {&s_json, &s_load}) log("  " + s->name + ": " + s->spread());
  ratio_result("load.small", "load of " + std::to_string(c.small) + " small tensors vs boost::json::parse of its header alone",
               s_load, s_json, 2.0, "+" + fmt_mib(s_load.peak()) + " (json +" + fmt_mib(s_json.peak()) + ")");
  remove_quietly(path);
}

// --- peak_rss: a whole program that loads, against one that preads ---------------------------------

void peak_rss(const config& c) {
  log("== peak_rss: programs that load " + c.size_label() + ", each a child process");
  const std::string file = (c.dir / "load_peak.safetensors").string();
  std::vector<std::string> sizes = c.size_flags();
  const auto child = [&](std::vector<std::string> arguments) {
    arguments.insert(arguments.end(), sizes.begin(), sizes.end());
    return run_child(arguments);
  };
  child({"--child=make", file});
  const double target = 1.15 * c.mib() + 64;
  const child_result base = child({"--child=pread", file});
  const child_result fresh = child({"--child=read-params", file, "--template=shape"});
  const child_result init = child({"--child=read-params", file, "--template=init"});
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", c.mib());
  peak_result("load.peak_rss.fresh_leaves", std::string("load + read_params of all ") + mib + " MiB into a struct "
              "(row-major, fresh leaves: shapes only) vs a program that preads into a fresh struct", target, base, fresh);
  peak_result("load.peak_rss.initialized", "the same, restoring into initialized params: read_params(load(f), params)",
              target, base, init);
  remove_quietly(file);
}

// --- sparse: one entry of a 10 GiB sparse file ----------------------------------------------------

std::string sparse_name(long i) {
  char text[32];
  std::snprintf(text, sizeof text, "blocks.%04ld", i);
  return text;
}

// A block of parameters as the sparse file names them: blocks.<i>.w
struct block {
  row_matrix w;
};

// A valid header for `entries` F32 [rows, cols] entries, the file extended with ftruncate.
void make_sparse(const fs::path& path, long entries, long rows, long cols) {
  const std::uint64_t entry_bytes = static_cast<std::uint64_t>(rows * cols) * 4;
  std::string json = "{";
  for (long i = 0; i < entries; ++i) {
    if (i) json += ',';
    json += "\"" + sparse_name(i) + ".w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(rows) + "," +
            std::to_string(cols) + "],\"data_offsets\":[" + std::to_string(entry_bytes * static_cast<std::uint64_t>(i)) +
            "," + std::to_string(entry_bytes * static_cast<std::uint64_t>(i + 1)) + "]}";
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');
  const std::uint64_t n = json.size();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open");
  write_all(fd, &n, 8);
  write_all(fd, json.data(), json.size());
  if (::ftruncate(fd, static_cast<off_t>(8 + n + entry_bytes * static_cast<std::uint64_t>(entries))) != 0)
    die("ftruncate");
  if (::fsync(fd) != 0) die("fsync");  // clean pages, so that they can be dropped
  ::close(fd);
}

// How many pages of `path` are in the page cache (mincore of a fresh mapping: mapping faults
// nothing in).
std::size_t cached_pages(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open");
  const std::size_t size = fs::file_size(path);
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) die("mmap");
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // The vector of flags is mapped and unmapped here, not taken from the heap, so that it leaves
  // nothing resident behind to blur the RSS figures.
  const std::size_t pages = (size + page - 1) / page;
  void* flags = ::mmap(nullptr, pages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (flags == MAP_FAILED) die("mmap");
  auto* in_core = static_cast<unsigned char*>(flags);
  if (::mincore(base, size, in_core) != 0) die("mincore");
  std::size_t n = 0;
  for (std::size_t i = 0; i < pages; ++i) n += in_core[i] & 1u;
  ::munmap(flags, pages);
  ::munmap(base, size);
  ::close(fd);
  return n;
}

// The readahead window (KiB) of the block device holding `path`, for the report.
std::string read_ahead_kb(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "unknown";
  const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  for (const char* q : {"/queue/read_ahead_kb", "/../queue/read_ahead_kb"}) {
    std::ifstream in(dev + q);
    std::string value;
    if (in >> value) return value;
  }
  return "unknown";
}

std::string proc_io() {
  std::ifstream in("/proc/self/io");
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("rchar", 0) == 0 || line.rfind("read_bytes", 0) == 0) out += line + "; ";
  return out;
}

struct sparse_sizes {
  long entries, rows, cols, index;
  explicit sparse_sizes(const args& a)
      : entries(a.num("entries", 2560)), rows(a.num("entry-rows", 1024)), cols(a.num("entry-cols", 1024)),
        index(std::min(a.num("index", 37), entries - 1)) {}
  [[nodiscard]] std::vector<std::string> flags() const {
    return {"--entries=" + std::to_string(entries), "--entry-rows=" + std::to_string(rows),
            "--entry-cols=" + std::to_string(cols), "--index=" + std::to_string(index)};
  }
};

// The child: the file dropped from the page cache, loaded, one entry read; the RSS and the file's
// cached pages (mincore) before and after each step; then the load's time against parsing the
// header alone. Prints its RESULT lines itself.
void sparse_child(const fs::path& path, const sparse_sizes& z, long reps) {
  const double entry_mib = static_cast<double>(z.rows * z.cols) * 4 / (1024.0 * 1024.0);
  const auto page_kib = static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1024.0;
  const double file_gib = static_cast<double>(fs::file_size(path)) / (1024.0 * 1024.0 * 1024.0);
  const std::string header = read_header_block(path);
  const double header_mib = static_cast<double>(header.size()) / (1024.0 * 1024.0);

  drop_from_page_cache(path);
  const std::size_t pages0 = cached_pages(path);
  log("  INFO io before: " + proc_io());
  info("before load");
  const mem_status m0 = read_status();
  double t0 = now_s();
  std::optional<ckpt::checkpoint> t = ckpt::load(path);
  const double first_load = now_s() - t0;
  const mem_status m1 = read_status();
  const std::size_t pages1 = cached_pages(path);
  info("after load (" + std::to_string(t->size()) + " entries)");
  block one{row_matrix(z.rows, z.cols)};  // shapes only: storage untouched
  t0 = now_s();
  ckpt::read_params(*t, one, {.prefix = sparse_name(z.index)});
  const double extract = now_s() - t0;
  const mem_status m2 = read_status();
  const std::size_t pages2 = cached_pages(path);
  info("after reading " + sparse_name(z.index) + ".w (value " + std::to_string(one.w(3, 4)) + ")");
  log("  INFO io after: " + proc_io());
  const double load_rise = static_cast<double>(m1.rss_kib - m0.rss_kib) / 1024.0;
  const double extract_rise = static_cast<double>(m2.rss_kib - m1.rss_kib) / 1024.0;
  const double extract_file = static_cast<double>(m2.file_kib - m1.file_kib) / 1024.0;
  const double touched_load = static_cast<double>(pages1 - pages0) * page_kib / 1024.0;
  const double touched_extract = static_cast<double>(pages2 - pages1) * page_kib / 1024.0;
  std::fprintf(stderr, "  INFO file pages brought into the page cache: by load %.2f MiB (header %.2f MiB), by the "
               "extraction %.2f MiB (entry %.2f MiB)\n", touched_load, header_mib, touched_extract, entry_mib);

  // Timing: load (header warm now) vs Boost.JSON parsing the header alone, median of reps.
  series s_load{"load"}, s_json{"json"};
  for (long r = 0; r < reps; ++r) {
    s_load.add(measure([&] { t = ckpt::load(path); }));
    std::optional<boost::json::value> v;
    s_json.add(measure([&] { v = boost::json::parse(std::string_view(header).substr(8)); }));
  }
  std::fprintf(stderr, "  sparse: first load %.4f s, extraction %.4f s; load %s; json %s\n", first_load, extract,
               s_load.spread().c_str(), s_json.spread().c_str());
  const double process_peak = static_cast<double>(read_status().hwm_kib) / 1024.0;
  char what[256], memory[256], cell[64];
  std::snprintf(what, sizeof what,
                "load of a %.3g GiB sparse file (%zu entries, header %.2f MiB) vs boost::json::parse of its header; "
                "then read_params of one %.3g MiB entry: resident size",
                file_gib, t->size(), header_mib, entry_mib);
  std::snprintf(memory, sizeof memory, "RSS +%.2f MiB by load, +%.2f MiB by extraction (file-backed %+.2f MiB); "
                "process peak RSS %.0f MiB", load_rise, extract_rise, extract_file, process_peak);
  std::snprintf(cell, sizeof cell, "RSS <= +%.2f MiB", entry_mib + 0.5);
  // The process: the header's parse at load, the entry's own copy at extraction.
  const bool resident_ok = extract_rise <= entry_mib + 0.5 && load_rise <= header_mib * 4 + 1;
  result("load.sparse.resident", what, fmt_time(s_load.med()), fmt_time(s_json.med()),
         fmt_ratio(s_load.med() / s_json.med()), cell, resident_ok ? "pass" : "MISS", memory);
  // The file: which of its pages the kernel brought in (mincore), readahead included.
  std::snprintf(what, sizeof what,
                "the same: pages of the file read into the page cache (mincore), the kernel's readahead included "
                "(read_ahead_kb %s)", read_ahead_kb(path).c_str());
  std::snprintf(memory, sizeof memory, "read %.2f MiB by load (header %.2f), %.2f MiB by extraction (entry %.2f)",
                touched_load, header_mib, touched_extract, entry_mib);
  std::snprintf(cell, sizeof cell, "read <= %.2f MiB", entry_mib + 0.5);
  result("load.sparse.pages_read", what, "load " + fmt_time(first_load) + ", extraction " + fmt_time(extract) +
         " (first, cold)", "-", "-", cell,
         touched_extract <= entry_mib + 0.5 && touched_load <= header_mib + 0.5 ? "pass" : "MISS", memory);
}

void sparse(const config& c, const args& a) {
  const sparse_sizes z(a);
  log("== sparse: one entry of a sparse file of " + std::to_string(z.entries) + " entries, a child process");
  const fs::path file = c.dir / "load_sparse.safetensors";
  make_sparse(file, z.entries, z.rows, z.cols);
  std::vector<std::string> arguments{"--child=sparse", file.string(), "--reps=" + std::to_string(c.reps)};
  for (auto& f : z.flags()) arguments.push_back(std::move(f));
  run_child(arguments);
  remove_quietly(file);
}

// --- The children's side ----------------------------------------------------------------------------

int child_main(const std::string& what, const args& a) {
  if (a.positional.size() != 1) throw std::invalid_argument("--child=" + what + " takes one FILE");
  const fs::path path = a.positional[0];
  const config z = read_config(a, false);
  if (what == "make") {
    const row_model m = make_row_model(z.tensors, z.rows, z.cols);
    ckpt::save(path, {{m, "model"}});
  } else if (what == "read-params") {
    // A template that only gives the shapes: Eigen leaves the storage uninitialized, so its pages
    // are never touched. With --template=init it is zeroed, as live parameters would be.
    info("start");
    row_model like = make_row_model(z.tensors, z.rows, z.cols, false);
    if (a.str("template", "shape") == "init")
      for (auto& l : like.layers) l.setZero();
    info("template made");
    ckpt::read_params(ckpt::load(path), like, {.prefix = "model"});
    info("read (value " + std::to_string(like.layers.back()(0, 1)) + ")");
  } else if (what == "pread") {
    // The baseline: a fresh struct, the entries pread into it.
    const std::string header = read_header_block(path);
    row_model m = make_row_model(z.tensors, z.rows, z.cols, false);
    pread_once_into(path, layout_of(header), header.size(), m);
    info("read (value " + std::to_string(m.layers.back()(0, 1)) + ")");
  } else if (what == "sparse") {
    sparse_child(path, sparse_sizes(a), z.reps);
  } else {
    throw std::invalid_argument("unknown --child=" + what);
  }
  return 0;
}

constexpr const char* usage =
    "usage: ckpt_bench_load --dir=DIR [--case=NAME,...] [--tensors=64] [--rows-per=2048] [--cols=2048]\n"
    "                       [--reps=7] [--io-reps=5] [--diag-reps=3] [--small=100000]\n"
    "                       [--entries=2560] [--entry-rows=1024] [--entry-cols=1024] [--index=37]\n"
    "How fast does ckpt load? Each case against a baseline side by side; RESULT lines on stdout,\n"
    "the samples on stderr. Cases (default: all, in this order):\n";

}  // namespace

int main(int argc, char** argv) try {
  const args a(argc, argv);
  if (const std::string child = a.str("child", ""); !child.empty()) return child_main(child, a);
  const case_list cases(
      a, {{"peak_rss", "peak RSS of a program that loads and read_params into a fresh struct, vs one that preads"},
          {"sparse", "load of a sparse file (--entries), then read_params of one entry: RSS, pages read, time"},
          {"read_params", "load + read_params in place, row- and column-major, vs pread into preallocated buffers"},
          {"to_params", "load + to_params (new leaves), row- and column-major, vs the same pread and an allocating loader"},
          {"cold", "load + read_params with the file dropped from the page cache, vs a cold pread"},
          {"parts", "diagnostics: the template copy, mmap + memcpy, the transpose kernel vs memcpy"},
          {"allocating", "load + to_params vs a loader that allocates and preads, the two alone"},
          {"verify", "loads with the digest verified vs not: read_params, to_params, column-major, load alone"},
          {"verify_cold", "the same, read_params with the file dropped from the page cache"},
          {"small", "load of --small tiny tensors vs parsing its header"}});
  if (const std::optional<int> exit_code = cases.help_asked(a, usage)) return *exit_code;
  const config c = read_config(a, true);
  fs::create_directories(c.dir);
  // The child processes first, while this process holds no model (run_child).
  if (cases("peak_rss")) peak_rss(c);
  if (cases("sparse")) sparse(c, a);
  std::optional<row_model> m;
  const bool needs_model = cases("read_params") || cases("to_params") || cases("cold") || cases("parts") ||
                           cases("allocating") || cases("verify") || cases("verify_cold");
  if (needs_model) {
    const double t0 = now_s();
    m = make_row_model(c.tensors, c.rows, c.cols);
    log("made " + c.size_label() + " in " + fmt_time(now_s() - t0));
  }
  if (cases("read_params") || cases("to_params") || cases("cold") || cases("parts")) loads(c, cases, *m);
  if (cases("allocating")) allocating(c, *m);
  if (cases("verify") || cases("verify_cold")) verified_loads(c, cases, *m);
  if (cases("small")) small(c);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_bench_load: %s\n", e.what());
  return 1;
}

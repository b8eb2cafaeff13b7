// ckpt_bench_save: how fast does ckpt save? Each case times ckpt against a baseline run side by side
// in this process (median of N, rotating order), on files in --dir, and prints one RESULT line per
// figure (common.hpp) on stdout, the samples on stderr. bench/run.sh drives it; `--help` lists the
// cases.
//
//   ckpt_bench_save --dir=DIR [--case=sections,save_async,...] [--tensors=64] [--rows-per=2048]
//                   [--cols=2048] [--reps=7] [--io-reps=5] [--small=100000]

#include "harness.hpp"

#include <ckpt/manager.hpp>

// The digest's hash, as src/format/writer.cpp reaches it (runtime-dispatched on x86).
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

namespace {

using namespace bench;

// --- sections, of_params, column_major, save_async: 1 GiB saved, in one rotation ---------------

void saves(const config& c, const case_list& cases, const row_model& m) {
  const bool sections = cases("sections"), of_params = cases("of_params"), column_major = cases("column_major"),
             async = cases("save_async");
  log("== save " + c.size_label() + " (sections, of_params, column_major, save_async)");
  const fs::path stream = c.dir / "save_stream.safetensors", snapshot = c.dir / "save_snapshot.safetensors",
                 plain = c.dir / "save_plain.safetensors", plain_tmp = c.dir / ".save_plain.safetensors.tmp";
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
  std::optional<col_model> mc;
  if (column_major) mc = make_col_model(c.tensors, c.rows, c.cols);
  const fs::path col_stream = c.dir / "save_col_stream.safetensors", col_snapshot = c.dir / "save_col_snapshot.safetensors";
  series s_col_stream{"ckpt::save(sections) (live), column-major"}, s_col_snapshot{"ckpt::save(of_params), column-major"};
  auto col_once = [&] {
    remove_quietly(col_stream);
    s_col_stream.add(measure([&] { ckpt::save(col_stream, {{*mc, "model"}}); }));
    remove_quietly(col_snapshot);
    s_col_snapshot.add(measure([&] { ckpt::save(col_snapshot, ckpt::of_params(*mc, "model")); }));
  };
  // checkpoint_manager::save_async of the same state, whose call (the snapshot, then starting the
  // write) is timed apart from the write it starts. Two ways: the sections overload, which
  // snapshots into the manager's arena (buffers reused from the previous save), and a fresh
  // snapshot by of_params.
  const fs::path folder = c.dir / "save_manager";
  std::optional<ckpt::checkpoint_manager> manager;
  std::int64_t step = 0;
  series s_arena{"save_async(sections) call (arena snapshot)"}, s_live{"manager.save(sections) (live, sync)"},
      s_call{"of_params + save_async call"}, s_of_params{"of_params alone (the snapshot)"},
      s_bare{"save_async call alone, snapshot prebuilt"}, s_total{"save_async(sections) until wait() returns"};
  auto arena_once = [&] {
    const double t0 = now_s();
    s_arena.add(measure([&] { manager->save_async(++step, {{m, "model"}}); }));
    manager->wait();
    s_total.seconds.push_back(now_s() - t0);
    s_total.extra_mib.push_back(0);
  };
  auto live_once = [&] { s_live.add(measure([&] { manager->save(++step, {{m, "model"}}); })); };
  auto fresh_once = [&] {
    std::optional<ckpt::checkpoint> t;
    s_of_params.add(measure([&] { t = ckpt::of_params(m, "model"); }));
    s_bare.add(measure([&] { manager->save_async(++step, {*t}); }));
    t.reset();  // the background write holds its own reference
    s_call.seconds.push_back(s_of_params.seconds.back() + s_bare.seconds.back());
    s_call.extra_mib.push_back(s_of_params.extra_mib.back());
    manager->wait();
  };
  if (async) {
    manager.emplace(folder, ckpt::checkpoint_manager::options{.max_to_keep = 1});
    // The arena's first snapshot allocates; the figures time the steady state that follows.
    manager->save_async(++step, {{m, "model"}});
    manager->wait();
  }
  // One rotation of the variants the cases need, in this order.
  std::vector<std::function<void()>> variants;
  if (sections || of_params || column_major) variants.emplace_back(plain_once);
  if (sections || column_major) variants.emplace_back(stream_once);
  if (of_params || async) variants.emplace_back(snapshot_once);
  if (async) {
    variants.emplace_back(arena_once);
    variants.emplace_back(live_once);
    variants.emplace_back(fresh_once);
  }
  if (sections) variants.emplace_back(plain_durable_once);
  if (column_major) variants.emplace_back(col_once);
  rotate(c.io_reps, variants);
  for (const fs::path* p : {&stream, &snapshot})
    if (fs::exists(plain) && fs::exists(*p) && fs::file_size(plain) != fs::file_size(*p))
      throw std::runtime_error("save: " + p->filename().string() + " and the plain write differ in size");
  for (const auto* s : {&s_plain, &s_plain_durable, &s_stream, &s_snapshot, &s_arena, &s_live, &s_call, &s_of_params,
                        &s_bare, &s_total, &s_col_stream, &s_col_snapshot})
    if (!s->seconds.empty()) log("  " + s->name + ": " + s->spread());
  if (!s_plain.seconds.empty()) log("  plain write throughput: " + std::to_string(c.gib() / s_plain.med()) + " GiB/s");
  if (async) log("  the background write: " + fmt_time(std::max(s_total.med() - s_arena.med(), 0.0)) + " (median)");
  if (sections) {
    ratio_result("save.sections", "save " + c.size_label() + ", save(sections) (live, streaming) vs write+fsync+rename",
                 s_stream, s_plain, 1.10, "+" + fmt_mib(s_stream.peak()) + " (base +" + fmt_mib(s_plain.peak()) + ")");
    ratio_result("save.sections.durable_floor", "diagnostic: save(sections) vs write+fsync+rename+fsync(folder), the "
                 "calls ckpt makes for durability", s_stream, s_plain_durable, 0, "-");
  }
  if (of_params)
    ratio_result("save.of_params", "save " + c.size_label() + ", ckpt::save(of_params(...)) (snapshot incl. copy) vs "
                 "write+fsync+rename", s_snapshot, s_plain, 0, "+" + fmt_mib(s_snapshot.peak()));
  if (column_major) {
    ratio_result("save.column_major.sections", "save(sections) of column-major leaves (MatrixXf, reordered to C order) "
                 "vs the same of row-major leaves, " + c.size_label(), s_col_stream, s_stream, 1.6,
                 "+" + fmt_mib(s_col_stream.peak()));
    ratio_result("save.column_major.of_params", "save(of_params(...)) of column-major leaves vs write+fsync+rename of "
                 "row-major ones", s_col_snapshot, s_plain, 0, "+" + fmt_mib(s_col_snapshot.peak()));
  }
  if (async) {
    ratio_result("save.save_async.arena_call", "checkpoint_manager::save_async(step, {{params, \"model\"}}) call of " +
                 c.size_label() + " (snapshot into the reused arena + starting the write) vs the synchronous "
                 "manager.save(step, {{params, \"model\"}}) (live, no snapshot)", s_arena, s_live, 0.15,
                 "+" + fmt_mib(s_arena.peak()) + " (sync +" + fmt_mib(s_live.peak()) + ")");
    ratio_result("save.save_async.vs_of_params", "the same save_async call vs the synchronous save(of_params(...)) "
                 "(snapshot)", s_arena, s_snapshot, 0.15, "-");
    ratio_result("save.save_async.of_params_call", "diagnostic: save_async(step, of_params(...)) call (a fresh snapshot "
                 "every time) vs the same live sync save", s_call, s_live, 0, "+" + fmt_mib(s_call.peak()));
    ratio_result("save.save_async.call_alone", "diagnostic: the save_async call alone (snapshot prebuilt) vs the same "
                 "live sync save", s_bare, s_live, 0, "-");
  }
  manager.reset();
  for (const fs::path& p : {stream, snapshot, plain, col_stream, col_snapshot}) remove_quietly(p);
  std::error_code ec;
  fs::remove_all(folder, ec);
}

// --- digest: what writing the data digest adds to a save ------------------------------------------

void digest(const config& c, const row_model& m) {
  log("== digest: saves with the data digest (XXH3-64), " + c.size_label());
  const fs::path plain = c.dir / "save_nodigest.safetensors", hashed = c.dir / "save_digest.safetensors";
  series s_save{"save(sections)"}, s_save_digest{"save(sections), digest on"};
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
    throw std::runtime_error("digest: the data sections differ in size");
  log("  (checksum " + std::to_string(checksum) + ")");
  for (const auto* s : {&s_save, &s_save_digest, &s_hash_memory}) log("  " + s->name + ": " + s->spread());
  ratio_result("save.digest", "save " + c.size_label() + " with the digest vs without (save(sections), live)",
               s_save_digest, s_save, 1.10, "+" + fmt_mib(s_save_digest.peak()) + " (without +" + fmt_mib(s_save.peak()) + ")");
  ratio_result("save.digest.hash_in_memory", "diagnostic: XXH3-64 of the same bytes in memory (the work the digest "
               "adds to a save) vs the save without digest", s_hash_memory, s_save, 0, "-");
  for (const fs::path& p : {plain, hashed}) remove_quietly(p);
}

// --- small: 100,000 small tensors -------------------------------------------------------------------

void small(const config& c) {
  log("== small: save of " + std::to_string(c.small) + " small tensors");
  const fs::path path = c.dir / "save_small.safetensors";
  const ckpt::checkpoint t = small_tensors(c.small);
  ckpt::save(path, t);
  log("  file " + std::to_string(fs::file_size(path)) + " bytes, header " +
      std::to_string(read_header_block(path).size() - 8) + " bytes");
  series s_load{"ckpt::load"}, s_save{"ckpt::save"};
  std::size_t seen = 0;
  auto load_once = [&] {
    std::optional<ckpt::checkpoint> loaded;
    s_load.add(measure([&] { loaded = ckpt::load(path); }));
    seen += loaded->size();
  };
  auto save_once = [&] {
    remove_quietly(path);
    s_save.add(measure([&] { ckpt::save(path, t); }));
  };
  load_once();  // warm-up
  s_load = series(s_load.name);
  rotated(c.reps, load_once, save_once);
  log("  (entries seen " + std::to_string(seen) + ")");
  for (const auto* s : {&s_load, &s_save}) log("  " + s->name + ": " + s->spread());
  ratio_result("save.small", "save (incl. fsync+rename) of " + std::to_string(c.small) + " small tensors vs its load",
               s_save, s_load, 3.0, "+" + fmt_mib(s_save.peak()));
  remove_quietly(path);
}

// --- peak_rss: a whole program that holds the params and saves them, against one that writes ----

void peak_rss(const config& c) {
  log("== peak_rss: programs that save " + c.size_label() + ", each a child process");
  const std::vector<std::string> sizes = c.size_flags();
  const auto child = [&](const char* what, const std::string& name) {
    std::vector<std::string> arguments{std::string("--child=") + what, (c.dir / name).string()};
    arguments.insert(arguments.end(), sizes.begin(), sizes.end());
    const child_result r = run_child(arguments);
    remove_quietly(c.dir / name);
    return r;
  };
  const double target = c.mib() + 64;
  const child_result base = child("write", "save_peak_plain.safetensors");
  const child_result live = child("save-sections", "save_peak_live.safetensors");
  const child_result snapshot = child("save-of-params", "save_peak_snapshot.safetensors");
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", c.mib());
  peak_result("save.peak_rss.sections", std::string("hold ") + mib + " MiB of params and save them (sections, live) vs a "
              "program that writes them with write+fsync", target, base, live);
  peak_result("save.peak_rss.of_params", "the same through save(of_params(...)) (snapshot; the target is for the live "
              "path)", target, base, snapshot);
}

// --- The children's side ----------------------------------------------------------------------------

int child_main(const std::string& what, const args& a) {
  if (a.positional.size() != 1) throw std::invalid_argument("--child=" + what + " takes one FILE");
  const fs::path path = a.positional[0];
  const config z = read_config(a, false);
  const row_model m = make_row_model(z.tensors, z.rows, z.cols);
  info("params made");
  if (what == "save-sections") {
    ckpt::save(path, {{m, "model"}});
  } else if (what == "save-of-params") {
    ckpt::save(path, ckpt::of_params(m, "model"));
  } else if (what == "write") {
    const fs::path tmp = path.string() + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("open");
    for (const auto& l : m.layers) write_all(fd, l.data(), static_cast<std::size_t>(l.size()) * sizeof(float));
    if (::fsync(fd) != 0 || ::close(fd) != 0) die("fsync");
    if (::rename(tmp.c_str(), path.c_str()) != 0) die("rename");
  } else {
    throw std::invalid_argument("unknown --child=" + what);
  }
  info("saved");
  return 0;
}

constexpr const char* usage =
    "usage: ckpt_bench_save --dir=DIR [--case=NAME,...] [--tensors=64] [--rows-per=2048] [--cols=2048]\n"
    "                       [--reps=7] [--io-reps=5] [--small=100000]\n"
    "How fast does ckpt save? Each case against a baseline side by side; RESULT lines on stdout,\n"
    "the samples on stderr. Cases (default: all, in this order; sections to save_async share one rotation):\n";

}  // namespace

int main(int argc, char** argv) try {
  const args a(argc, argv);
  if (const std::string child = a.str("child", ""); !child.empty()) return child_main(child, a);
  const case_list cases(
      a, {{"peak_rss", "peak RSS of a program that holds the params and saves them, live or of_params, vs one that writes"},
          {"sections", "save(sections) (live) vs write+fsync+rename of the same bytes, and with the folder's fsync"},
          {"of_params", "save(of_params(...)) (snapshot, then save) vs the same write"},
          {"column_major", "save of column-major leaves vs row-major ones, and of_params of them vs the write"},
          {"save_async", "checkpoint_manager::save_async's call vs the synchronous save, live and of_params"},
          {"digest", "save with the digest vs without, and XXH3-64 of the same bytes in memory"},
          {"small", "save of --small tiny tensors vs their load"}});
  if (const std::optional<int> exit_code = cases.help_asked(a, usage)) return *exit_code;
  const config c = read_config(a, true);
  fs::create_directories(c.dir);
  // The child processes first, while this process holds no model (run_child).
  if (cases("peak_rss")) peak_rss(c);
  std::optional<row_model> m;
  const bool rotation = cases("sections") || cases("of_params") || cases("column_major") || cases("save_async");
  if (rotation || cases("digest")) {
    const double t0 = now_s();
    m = make_row_model(c.tensors, c.rows, c.cols);
    log("made " + c.size_label() + " in " + fmt_time(now_s() - t0));
  }
  if (rotation) saves(c, cases, *m);
  if (cases("digest")) digest(c, *m);
  if (cases("small")) small(c);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_bench_save: %s\n", e.what());
  return 1;
}

// ckpt::mpi with its run in a bucket (issue 51), at 1, 2 and 4 ranks, against the S3 server of the
// CTest fixture s3_server (tests/s3/s3_server.sh): a manager saves its steps there (each rank
// uploads its shard, rank 0 commits the index last), keeps them by its rules (index first, then the
// shards), sets a damaged step aside, clears what a killed job left and resumes on another rank
// count; a load fetches each shard once in all, not once per rank; a step of slices is one object,
// uploaded in parts by the ranks; the node-local tiers drain to the bucket and restore from it,
// a step of slices too (the ranks' parts drained as the one object of slices);
// and (the in-process fake store, tests/s3/fake_store.hpp, since the fixture's server answers 501
// to conditional writes and shows no order) a step's index never replaces one another writer
// committed meanwhile, and retention deletes a step's index before its shards.

#include "mpi_test.hpp"
#include "sliced_state.hpp"

#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>

#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder
#include "s3/client.hpp"  // the bucket as the tests look at it, and the bytes received (src/)

#define CKPT_FAKE_STORE_REQUIRE CHECK
#include "s3/fake_store.hpp"  // tests/s3/

#include <Eigen/Core>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <unistd.h>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;
namespace s3 = ckpt::detail::s3;

// The fixture's server in the standard AWS environment, on every rank.
void use_server() {
  const char* dir = std::getenv("CKPT_S3_SERVER_DIR");
  if (dir == nullptr) fail(__FILE__, __LINE__, "CKPT_S3_SERVER_DIR is not set: run the test through ctest (fixture s3_server)");
  std::string endpoint;
  std::ifstream(std::string(dir) + "/endpoint") >> endpoint;
  CHECK(!endpoint.empty());
  ::setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "test:tester", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
}

// Collective: a bucket of this job's (made once by rank 0), and the run `s3://<bucket>/<case>`.
struct bucket_run {
  std::string bucket, prefix, url;
};
bucket_run run_in_bucket(const fs::path& folder) {
  static std::string bucket;
  if (bucket.empty()) {
    int pid = static_cast<int>(::getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    bucket = "ckpt-mpi-" + std::to_string(pid) + "-" + std::to_string(size_of(MPI_COMM_WORLD));
    if (rank_of(MPI_COMM_WORLD) == 0) s3::client(s3::config::from_environment()).create_bucket(bucket);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  const std::string prefix = folder.filename().string();
  return {bucket, prefix, "s3://" + bucket + "/" + prefix};
}

// The keys under the run (relative to it), sorted.
std::vector<std::string> keys_of(const bucket_run& run) {
  std::vector<std::string> keys;
  for (const s3::object_info& o : s3::client(s3::config::from_environment()).list(run.bucket, run.prefix + "/"))
    keys.push_back(o.key.substr(run.prefix.size() + 1));
  std::ranges::sort(keys);
  return keys;
}

std::string shard(std::size_t k, std::size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k, n);
  return name;
}

std::string step_name(std::int64_t step) { return ckpt::mpi::detail::step_folder("", step).filename().string(); }

// What rank `rank` holds at `step`: a part of its own and a replicated counter.
ckpt::checkpoint state_of(int rank, std::int64_t step) {
  return ckpt::concat({ckpt::of_int("part." + std::to_string(rank), static_cast<int>(step * 10 + rank)),
                       ckpt::of_int("step", static_cast<int>(step))});
}

// The parts of `ranks` ranks at `step`.
void check_step(const ckpt::checkpoint& t, std::int64_t step, int ranks) {
  CHECK_EQ(ckpt::to_int("step", t), step);
  CHECK_EQ(t.size(), static_cast<std::size_t>(ranks) + 1);
  for (int r = 0; r < ranks; ++r) CHECK_EQ(ckpt::to_int("part." + std::to_string(r), t), step * 10 + r);
}

// The bytes every rank received from the bucket during `f`, added up over the ranks.
template <class F>
std::uint64_t fetched_by_the_job(F&& f) {
  const std::uint64_t before = s3::bytes_received();
  f();
  std::uint64_t mine = s3::bytes_received() - before, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

void a_manager_keeps_its_steps_in_a_bucket_and_resumes_on_another_rank_count(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const bucket_run run = run_in_bucket(folder);
  {
    ckpt::mpi::checkpoint_manager manager(comm, run.url, {.max_to_keep = 2});
    CHECK(manager.steps().empty());
    CHECK(manager.save(1, {state_of(rank, 1)}));
    CHECK(manager.save_async(2, {state_of(rank, 2)}));  // each rank's upload on its background thread
    CHECK(manager.save(3, {state_of(rank, 3)}));
    CHECK(manager.save_async(4, {state_of(rank, 4)}));
    manager.wait();
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{3, 4}));
    CHECK_EQ(manager.path_of(4), fs::path(run.url + "/" + step_name(4)));
    const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
    CHECK_EQ(latest.step, 4);
    check_step(*latest, 4, size);
    // A committed step is never saved again.
    CHECK(MESSAGE_OF(std::invalid_argument, manager.save(4, {state_of(rank, 4)})).find("not newer") != std::string::npos);
  }
  // Each rank's shard and the index; the steps the rules drop are gone, shards and all; no lock (a
  // bucket has none), the run's id.
  std::vector<std::string> expected{".ckpt-run-id"};
  for (const std::int64_t step : {3, 4}) {
    expected.push_back(step_name(step) + "/model.safetensors.index.json");
    for (int k = 1; k <= size; ++k) expected.push_back(step_name(step) + "/" + shard(static_cast<std::size_t>(k), static_cast<std::size_t>(size)));
  }
  std::ranges::sort(expected);
  CHECK_EQ(keys_of(run), expected);

  // Another rank count: rank 0 alone resumes the run, and saves its next step as one shard.
  MPI_Comm alone = MPI_COMM_NULL;
  MPI_Comm_split(comm, rank == 0 ? 0 : MPI_UNDEFINED, 0, &alone);
  if (rank == 0) {
    {
      ckpt::mpi::checkpoint_manager manager(alone, run.url, {.max_to_keep = 2});
      CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{3, 4}));
      check_step(*manager.load_latest(), 4, size);
      CHECK(manager.save(5, {state_of(0, 5)}));
      CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{4, 5}));
    }
    MPI_Comm_free(&alone);
    // Every reader reads the MPI steps of a bucket: a read-only single-process manager, ckpt::load.
    ckpt::checkpoint_manager reader(run.url, {.read_only = true});
    CHECK_EQ(reader.steps(), (std::vector<std::int64_t>{4, 5}));
    check_step(reader.load(4), 4, size);
    check_step(ckpt::load(run.url + "/" + step_name(5) + "/model.safetensors.index.json"), 5, 1);
  }
  MPI_Barrier(comm);
  // The whole job again: the run's id was made once.
  ckpt::mpi::checkpoint_manager manager(comm, run.url, {.max_to_keep = 2});
  check_step(*manager.load_latest(), 5, 1);
}

void a_load_from_a_bucket_fetches_each_shard_once_in_all(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const bucket_run run = run_in_bucket(folder);
  // Each rank's 1 MiB part.
  const Eigen::VectorXf part = Eigen::VectorXf::LinSpaced(1 << 18, static_cast<float>(rank), static_cast<float>(rank + 1));
  const std::string name = "part" + std::to_string(rank);
  ckpt::mpi::save(comm, run.url, 7, {ckpt::section(part, name)});
  std::uint64_t stored = 0;
  for (const s3::object_info& o : s3::client(s3::config::from_environment()).list(run.bucket, run.prefix + "/"))
    stored += o.size;
  ckpt::checkpoint t;
  const std::uint64_t fetched = fetched_by_the_job([&] { t = ckpt::mpi::load(comm, run.url, 7); });
  for (int r = 0; r < size; ++r) {
    Eigen::VectorXf back(1 << 18);
    ckpt::mpi::read_flat(t, "part" + std::to_string(r), 0, back);
    CHECK(back == Eigen::VectorXf::LinSpaced(1 << 18, static_cast<float>(r), static_cast<float>(r + 1)));
  }
  // Every shard crossed the network once (and the index a few times), not once per rank.
  if (rank == 0)
    std::cout << "a load of " << stored << " bytes in the bucket on " << size << " ranks fetched " << fetched
              << " bytes in all" << std::endl;
  CHECK(fetched >= stored);
  CHECK(fetched < stored + stored / 8);
  // The manager's load alike.
  ckpt::mpi::checkpoint_manager manager(comm, run.url);
  const std::uint64_t by_manager = fetched_by_the_job([&] { CHECK_EQ(manager.load_latest().step, 7); });
  CHECK(by_manager < stored + stored / 8);
}

void a_damaged_step_in_a_bucket_is_set_aside(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const bucket_run run = run_in_bucket(folder);
  ckpt::mpi::checkpoint_manager manager(comm, run.url, {.max_to_keep = 0});
  CHECK(manager.save(1, {state_of(rank, 1)}));
  CHECK(manager.save(2, {state_of(rank, 2)}));
  if (rank == 0) {
    // The last byte of the first shard's data changed: the digest no longer matches.
    s3::client c(s3::config::from_environment());
    const s3::object o{run.bucket, run.prefix + "/" + step_name(2) + "/" + shard(1, static_cast<std::size_t>(size))};
    std::string bytes = c.get(o);
    bytes.back() = static_cast<char>(bytes.back() ^ 1);
    static_cast<void>(c.put(o, std::as_bytes(std::span(bytes))));
  }
  MPI_Barrier(comm);
  const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
  CHECK_EQ(latest.step, 1);
  check_step(*latest, 1, size);
  CHECK_EQ(latest.skipped.size(), std::size_t{1});
  CHECK_EQ(latest.skipped[0].path, fs::path(run.url + "/" + step_name(2) + ".damaged"));
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{1});
  const std::vector<std::string> keys = keys_of(run);
  CHECK(std::ranges::none_of(keys, [](const std::string& k) { return k.starts_with(step_name(2) + "/"); }));
  CHECK(std::ranges::find(keys, step_name(2) + ".damaged/model.safetensors.index.json") != keys.end());
  // A new manager lists it as damaged, and deletes it when asked.
  ckpt::mpi::checkpoint_manager next(comm, run.url, {.max_to_keep = 0});
  CHECK(std::ranges::any_of(next.status(), [](const ckpt::checkpoint_manager::step_status& s) {
    return s.step == 2 && s.state == ckpt::checkpoint_manager::step_state::damaged;
  }));
  CHECK_EQ(next.remove_damaged().size(), std::size_t{1});
  CHECK(std::ranges::none_of(keys_of(run), [](const std::string& k) { return k.starts_with(step_name(2)); }));
}

// What a killed job left (a step's shards without its index, an upload neither completed nor
// aborted under a step folder) is cleared by the next job that opens the run for writing; a
// read-only manager and what is not a step's are left alone.
void opening_a_run_in_a_bucket_clears_what_a_killed_job_left(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const bucket_run run = run_in_bucket(folder);
  {
    ckpt::mpi::checkpoint_manager manager(comm, run.url);
    CHECK(manager.save(1, {state_of(rank, 1)}));
  }
  s3::client c(s3::config::from_environment());
  const std::string crashed = run.prefix + "/" + step_name(2) + "/" + shard(1, 1);
  if (rank == 0) {
    const std::string bytes = "a shard of a job killed before its index";
    static_cast<void>(c.put({run.bucket, crashed}, std::as_bytes(std::span(bytes))));
    static_cast<void>(c.put({run.bucket, run.prefix + "/notes.txt"}, std::as_bytes(std::span(bytes))));
    static_cast<void>(c.start_upload({run.bucket, run.prefix + "/" + step_name(3) + "/" + shard(1, 1)}));
  }
  MPI_Barrier(comm);
  {
    ckpt::mpi::checkpoint_manager reader(comm, run.url, {.read_only = true});
    CHECK_EQ(reader.steps(), std::vector<std::int64_t>{1});
  }
  if (rank == 0) {
    CHECK(c.head({run.bucket, crashed}).has_value());
    CHECK_EQ(c.uploads(run.bucket, run.prefix + "/").size(), std::size_t{1});
  }
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager manager(comm, run.url);
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{1});
  if (rank == 0) {
    CHECK(!c.head({run.bucket, crashed}).has_value());
    CHECK(c.uploads(run.bucket, run.prefix + "/").empty());
    CHECK(c.head({run.bucket, run.prefix + "/notes.txt"}).has_value());
  }
  CHECK(manager.save(2, {state_of(rank, 2)}));
  check_step(*manager.load_latest(), 2, size_of(comm));
}

void a_step_of_slices_in_a_bucket_is_one_object_uploaded_in_parts_by_the_ranks(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const bucket_run run = run_in_bucket(folder);
  // 5M floats (20 MB: parts of 8 MiB) cut unevenly over the ranks, and a column-major 64 x 1000
  // matrix (reordered as it is written) in blocks of rows.
  const std::int64_t n = 5'000'000;
  const Eigen::VectorXf whole = Eigen::VectorXf::LinSpaced(n, -1.0f, 1.0f);
  const Eigen::MatrixXf matrix = Eigen::MatrixXf::NullaryExpr(64, 1000, [](Eigen::Index i, Eigen::Index j) {
    return static_cast<float>(i * 1000 + j);
  });
  const auto cut = [&](std::int64_t total, int r) { return total * r * r / (size * size); };
  const std::int64_t first = cut(n, rank), last = cut(n, rank + 1);
  const Eigen::VectorXf mine = whole.segment(first, last - first);
  const std::int64_t row = cut(64, rank), rows = cut(64, rank + 1) - row;
  const Eigen::MatrixXf block = matrix.middleRows(row, rows);
  const std::vector<ckpt::mpi::slice> slices{ckpt::mpi::slice::flat("big", {n}, first, mine),
                                             ckpt::mpi::slice::rows("matrix", {64, 1000}, row, block)};
  ckpt::mpi::save(comm, run.url, 3, {ckpt::mpi::sliced(slices), ckpt::of_int("step", 3)});

  const std::vector<std::string> keys = keys_of(run);
  CHECK_EQ(keys, (std::vector<std::string>{step_name(3) + "/" + shard(1, 1), step_name(3) + "/model.safetensors.index.json"}));
  if (rank == 0) {
    s3::client c(s3::config::from_environment());
    CHECK(c.uploads(run.bucket, run.prefix + "/").empty());  // the upload completed, none left open
    // Byte for byte the file ckpt::save writes of the whole tensors (the digest too).
    const fs::path local = folder.parent_path() / "sliced-whole.safetensors";
    ckpt::save(local, {ckpt::section(whole, "big"), ckpt::section(matrix, "matrix"), ckpt::of_int("step", 3)},
               {{"step", "3"}});
    std::ifstream in(local, std::ios::binary);
    const std::string expected{std::istreambuf_iterator<char>(in), {}};
    const std::string object = c.get({run.bucket, run.prefix + "/" + keys[0]});
    CHECK_EQ(object.size(), expected.size());
    CHECK(object == expected);
    // Any reader: ckpt::load of the index (the digest verified).
    const ckpt::checkpoint t = ckpt::load(run.url + "/" + keys[1]);
    Eigen::VectorXf back(n);
    ckpt::mpi::read_flat(t, "big", 0, back);
    CHECK(back == whole);
  }
  // And the ranks, each its slice.
  const ckpt::checkpoint t = ckpt::mpi::load(comm, run.url, 3);
  Eigen::VectorXf back(last - first);
  ckpt::mpi::read_flat(t, "big", first, back);
  CHECK(back == mine);
  Eigen::MatrixXf rows_back(rows, 1000);
  ckpt::mpi::read_rows(t, "matrix", row, rows_back);
  CHECK(rows_back == block);
}

void node_local_tiers_drain_to_a_bucket_and_restore_from_it(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const bucket_run run = run_in_bucket(folder);
  const fs::path local = folder / "local";
  const ckpt::mpi::tiers levels{.local = local, .ranks_per_node = 1, .drain_every = 2};
  {
    ckpt::mpi::checkpoint_manager manager(comm, run.url, {.max_to_keep = 3}, levels);
    for (std::int64_t step = 1; step <= 3; ++step) CHECK(manager.save_async(step, {state_of(rank, step)}));
    manager.wait();
    // Step 1, neither drained nor among the 2 newest the local tiers keep, is gone.
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2, 3}));
  }
  // Step 2 is in the bucket, committed by its index; a manager without tiers reads it.
  std::vector<std::string> expected{".ckpt-run-id", step_name(2) + "/model.safetensors.index.json"};
  for (int k = 1; k <= size; ++k) expected.push_back(step_name(2) + "/" + shard(static_cast<std::size_t>(k), static_cast<std::size_t>(size)));
  std::ranges::sort(expected);
  CHECK_EQ(keys_of(run), expected);
  {
    ckpt::mpi::checkpoint_manager shared(comm, run.url, {.read_only = true});
    CHECK_EQ(shared.steps(), std::vector<std::int64_t>{2});
    check_step(shared.load(2), 2, size);
  }
  // A node-local tier is a folder of the node's, never a bucket: refused on every rank, by name.
  CHECK(MESSAGE_OF(std::invalid_argument, ckpt::mpi::checkpoint_manager(comm, run.url, {}, {.local = run.url + "-local"}))
            .find("tiers::local ('" + run.url + "-local') is in object storage") != std::string::npos);
  // Every node's local tier lost: the run restores step 2 from the bucket.
  MPI_Barrier(comm);
  if (rank == 0) fs::remove_all(local);
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager manager(comm, run.url, {.max_to_keep = 3}, levels);
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{2});
  const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
  CHECK_EQ(latest.step, 2);
  check_step(*latest, 2, size);
  CHECK_EQ(latest.sources.size(), static_cast<std::size_t>(size));
  for (const ckpt::checkpoint_manager::source& s : latest.sources) CHECK(s.from == ckpt::checkpoint_manager::tier::folder);
}

// A step of slices (sliced_state.hpp's tensors) in the node-local tiers drains to the bucket as the
// one object ckpt::mpi::save writes of the same slices and metadata, byte for byte, and with the
// local tiers lost the run restores it from there.
void a_step_of_slices_in_the_tiers_drains_to_a_bucket_as_one_object(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const bucket_run run = run_in_bucket(folder);
  const ckpt::mpi::tiers levels{.local = folder / "local", .ranks_per_node = 1, .drain_every = 1};
  const rank_state s = pieces_of(rank, size, 1.0f);
  const std::vector<ckpt::mpi::slice> slices = slices_of(s);
  {
    ckpt::mpi::checkpoint_manager manager(comm, run.url, {}, levels);
    CHECK(manager.save_async(1, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")}));
    manager.wait();
  }
  CHECK_EQ(keys_of(run), (std::vector<std::string>{".ckpt-run-id", step_name(1) + "/" + shard(1, 1),
                                                   step_name(1) + "/model.safetensors.index.json"}));
  const std::string key = step_name(1) + "/" + shard(1, 1);
  const std::string object =
      rank == 0 ? s3::client(s3::config::from_environment()).get({run.bucket, run.prefix + "/" + key}) : std::string();
  ckpt::metadata_map metadata = ckpt::load(run.url + "/" + key).metadata();
  metadata.erase("step");
  metadata.erase("ckpt.xxh3_64_file");
  ckpt::mpi::save(comm, folder / "plain", 1, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")}, metadata);
  if (rank == 0) CHECK(object == file_bytes(shard_of(folder / "plain", 1)));
  MPI_Barrier(comm);
  if (rank == 0) fs::remove_all(folder / "local");
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager manager(comm, run.url, {}, levels);
  const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
  CHECK_EQ(latest.step, 1);
  CHECK(same(*latest, whole_tensors(1.0f)));
}

// Collective: the in-process fake store (tests/s3/fake_store.hpp) in rank 0's process (null on the
// others), answering by `script`, every rank's endpoint until use_server().
std::unique_ptr<ckpt_s3_test::fake_store> serve_from_rank_0(MPI_Comm comm, ckpt_s3_test::fake_store::script script) {
  std::unique_ptr<ckpt_s3_test::fake_store> store;
  std::string endpoint;
  if (rank_of(comm) == 0) {
    store = std::make_unique<ckpt_s3_test::fake_store>(std::move(script));
    endpoint = store->endpoint();
  }
  int length = static_cast<int>(endpoint.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, comm);
  endpoint.resize(static_cast<std::size_t>(length));
  MPI_Bcast(endpoint.data(), length, MPI_CHAR, 0, comm);
  ::setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  return store;
}

// Finding: a step's index is written last and never over one that another writer of the run
// committed meanwhile (a conditional write): the save fails on every rank, and the other writer's
// step is left as it is, its shards too.
void a_steps_index_never_replaces_one_another_writer_committed(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const std::string bucket = "fake", prefix = folder.filename().string();
  const std::string index_key = prefix + "/" + step_name(2) + "/model.safetensors.index.json";
  const std::string theirs = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {}}";
  std::unique_ptr<ckpt_s3_test::fake_store> store;
  store = serve_from_rank_0(comm, [&](const ckpt_s3_test::fake_store::request& r) {
    // Another writer's index lands just before ours.
    if (r.method == "PUT" && r.key == index_key && r.headers.contains("if-none-match")) store->put_object(bucket, index_key, theirs);
    return ckpt_s3_test::fake_store::plan{};
  });
  {
    ckpt::mpi::checkpoint_manager manager(comm, "s3://" + bucket + "/" + prefix);
    CHECK(manager.save(1, {state_of(rank, 1)}));
    const std::string refused = MESSAGE_OF(ckpt::mpi::collective_error, manager.save(2, {state_of(rank, 2)}));
    CHECK(refused.find("another writer of the run committed it meanwhile") != std::string::npos);
    CHECK_EQ(manager.steps(), std::vector<std::int64_t>{1});
    if (rank == 0) CHECK_EQ(store->object(bucket, index_key), std::optional<std::string>(theirs));
  }
  MPI_Barrier(comm);
  use_server();
}


// Retention in a bucket deletes a step's index before any of its shards (the fake store records
// the deletions in order): a job killed half-way leaves shards without an index, which the next
// writing open clears, never an index without its shards.
void retention_in_a_bucket_deletes_a_steps_index_before_its_shards(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm), size = size_of(comm);
  const std::string prefix = folder.filename().string(), first = prefix + "/" + step_name(1) + "/";
  std::mutex mutex;
  std::vector<std::string> deleted;  // rank 0: step 1's keys, in the order they were deleted
  const std::unique_ptr<ckpt_s3_test::fake_store> store = serve_from_rank_0(comm, [&](const ckpt_s3_test::fake_store::request& r) {
    if (r.method == "DELETE" && r.key.starts_with(first)) {
      const std::lock_guard lock(mutex);
      deleted.push_back(r.key.substr(first.size()));
    }
    return ckpt_s3_test::fake_store::plan{};
  });
  {
    ckpt::mpi::checkpoint_manager manager(comm, "s3://fake/" + prefix, {.max_to_keep = 1});
    CHECK(manager.save(1, {state_of(rank, 1)}));
    CHECK(manager.save(2, {state_of(rank, 2)}));
    manager.wait();
    CHECK_EQ(manager.steps(), std::vector<std::int64_t>{2});
  }
  if (rank == 0) {
    const std::lock_guard lock(mutex);
    std::vector<std::string> expected{"model.safetensors.index.json"};
    for (int k = 1; k <= size; ++k) expected.push_back(shard(static_cast<std::size_t>(k), static_cast<std::size_t>(size)));
    CHECK_EQ(deleted.size(), expected.size());
    CHECK(!deleted.empty() && deleted.front() == expected.front());
    std::ranges::sort(deleted);
    std::ranges::sort(expected);
    CHECK_EQ(deleted, expected);
  }
  MPI_Barrier(comm);
  use_server();
}

}  // namespace

int main(int argc, char** argv) {
  use_server();
  return run_all(argc, argv, "test_mpi_bucket",
                 {{"a_manager_keeps_its_steps_in_a_bucket_and_resumes_on_another_rank_count", a_manager_keeps_its_steps_in_a_bucket_and_resumes_on_another_rank_count},
                  {"a_load_from_a_bucket_fetches_each_shard_once_in_all", a_load_from_a_bucket_fetches_each_shard_once_in_all},
                  {"a_damaged_step_in_a_bucket_is_set_aside", a_damaged_step_in_a_bucket_is_set_aside},
                  {"opening_a_run_in_a_bucket_clears_what_a_killed_job_left", opening_a_run_in_a_bucket_clears_what_a_killed_job_left},
                  {"a_step_of_slices_in_a_bucket_is_one_object_uploaded_in_parts_by_the_ranks", a_step_of_slices_in_a_bucket_is_one_object_uploaded_in_parts_by_the_ranks},
                  {"node_local_tiers_drain_to_a_bucket_and_restore_from_it", node_local_tiers_drain_to_a_bucket_and_restore_from_it},
                  {"a_step_of_slices_in_the_tiers_drains_to_a_bucket_as_one_object", a_step_of_slices_in_the_tiers_drains_to_a_bucket_as_one_object},
                  {"a_steps_index_never_replaces_one_another_writer_committed", a_steps_index_never_replaces_one_another_writer_committed},
                  {"retention_in_a_bucket_deletes_a_steps_index_before_its_shards", retention_in_a_bucket_deletes_a_steps_index_before_its_shards}});
}

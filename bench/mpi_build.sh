# bench/mpi_build.sh, sourced by the MPI run scripts (mpi_run.sh, mpi_sliced_run.sh,
# mpi_tiers_run.sh) with the targets they run: builds build-mpi-bench/ (Release,
# -DCKPT_BUILD_BENCH=ON, MPI required) unless --no-build is among the arguments, makes the scratch
# folder build-mpi-bench/work/ (removed at exit), and prints the machine's costs (bench/machine.cpp)
# that the tables depend on. Sets BUILD, work and args (the other arguments, for every run).
#   source bench/mpi_build.sh ckpt_mpi_bench -- "$@"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD="${CKPT_MPI_BENCH_DIR:-build-mpi-bench}"
targets=()
while [[ $# -gt 0 && $1 != -- ]]; do targets+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    *) args+=("$a") ;;
  esac
done
if [[ $build == 1 ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_BENCH=ON -DCKPT_BUILD_MPI=ON \
    -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$BUILD" --target "${targets[@]}" ckpt_machine
fi
work="$BUILD/work"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
"$BUILD/bench/ckpt_machine" --dir="$work"
echo

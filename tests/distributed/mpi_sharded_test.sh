#!/usr/bin/env bash
# Issue 20 under real MPI (ctest mpi_sharded): save on 4 ranks, load on 1, 2
# and 3 bit-exact; save and load on 1 and 2; a rank killed mid-save commits
# nothing and leaves the previous checkpoint intact, and the next save
# removes the temporary it left; the manager over 2 ranks (keep_last 2,
# async saves blocking under MPI_Init, in the background under
# MPI_THREAD_MULTIPLE), its step directories loaded on 1 and 3 ranks. Every mpirun is bounded in time (a hung job
# is killed). Usage: mpi_sharded_test.sh PATH/TO/ckpt_mpi_sharded_check
set -euo pipefail
check=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-mpi-XXXXXX")
trap 'rm -rf "$dir"' EXIT
mpi() {  # mpi NP ARGS...: one bounded mpirun
  local np=$1; shift
  timeout -s KILL 120 mpirun --allow-run-as-root --oversubscribe -np "$np" "$check" "$@"
}
fail() { echo "mpi_sharded_test: $*" >&2; exit 1; }

for np in 1 2 3 4; do mpi "$np" collectives - 0 || fail "collectives on $np ranks"; done
mpi 4 save "$dir/four" 7
for np in 1 2 3; do mpi "$np" load "$dir/four" 7 || fail "4 -> $np ranks"; done
for np in 1 2; do
  mpi "$np" save "$dir/same-$np" 3
  mpi "$np" load "$dir/same-$np" 3 || fail "$np -> $np ranks"
done
# The shard files: one per saving rank.
[ "$(ls "$dir/four" | grep -c '^model-0000[1-4]-of-00004.safetensors$')" = 4 ] || fail "not 4 shard files: $(ls "$dir/four")"

# Rank 2 dies between its write and the gather: mpirun fails, nothing new is committed.
if mpi 4 die "$dir/four" 8 2 2>"$dir/die.log"; then fail "the job with a dead rank succeeded"; fi
mpi 2 load "$dir/four" 7 || fail "the previous checkpoint after a dead rank"
leftover=$(ls -a "$dir" | grep -c 'ckpt-tmp' || true)
[ "$leftover" -ge 1 ] || fail "the killed save left no temporary (did it get as far as writing?)"
[ "$(ls "$dir")" = "$(printf 'die.log\nfour\nsame-1\nsame-2')" ] || fail "unexpected entries: $(ls "$dir")"
# The next save at that path removes the dead save's temporary.
mpi 4 save "$dir/four" 9
mpi 3 load "$dir/four" 9 || fail "the save after a dead rank"
leftover=$(ls -a "$dir" | grep -c 'ckpt-tmp' || true)
[ "$leftover" = 0 ] || fail "temporaries left after the next save: $(ls -a "$dir")"

# The manager over 2 ranks: steps 1..3 kept 2 and 3; then 4..6 in the
# background (MPI_THREAD_MULTIPLE), kept 5 and 6.
mpi 2 manager "$dir/run" 1 || fail "the manager on 2 ranks"
[ "$(ls "$dir/run" | grep '^step-')" = "$(printf 'step-00000002\nstep-00000003')" ] || fail "steps: $(ls "$dir/run")"
[ "$(ls "$dir/run/step-00000003/state" | grep -c '^model-0000[12]-of-00002.safetensors$')" = 2 ] ||
  fail "not 2 shard files: $(ls "$dir/run/step-00000003/state")"
for np in 1 3; do mpi "$np" load "$dir/run/step-00000003/state" 3 || fail "the manager's step on $np ranks"; done
status=0
mpi 2 manager-threads "$dir/run" 4 || status=$?
if [ "$status" = 0 ]; then
  [ "$(ls "$dir/run" | grep '^step-')" = "$(printf 'step-00000005\nstep-00000006')" ] || fail "steps: $(ls "$dir/run")"
  mpi 1 load "$dir/run/step-00000006/state" 6 || fail "the manager's background step on 1 rank"
elif [ "$status" != 77 ]; then
  fail "the manager on 2 ranks under MPI_THREAD_MULTIPLE"
else
  echo "mpi_sharded_test: MPI has no MPI_THREAD_MULTIPLE; the manager's background saves are not checked" >&2
fi
echo "mpi_sharded_test: ok"

# Run with cmake -P by the test mlp_trainer_mpi_runs: runs of the example binary over one node-local
# root (issue 49, finding 1). Run A (seed 1) leaves steps 75 and 100 in its local tiers; a new run
# (seed 2, its own empty --ckpt-dir) over the same --local-dir must not restore them with --resume,
# must not be refused as holding steps without it, and must end as an uninterrupted seed-2 run;
# so must run A made again after its folder was deleted (a new run under the same name). Run A's
# old steps are left alone.
# Inputs: MPIEXEC, TRAINER, WORK (a scratch folder, emptied first).
include("${CMAKE_CURRENT_LIST_DIR}/trainer_common.cmake")

# A new run over the local root: trained from its first step, never from another run's.
function(train_new)
  train(${ARGN})
  if(output MATCHES "restored step|resumed at")
    message(FATAL_ERROR "mlp_trainer_mpi ${ARGN}, a new run, resumed from another run's step:\n${output}")
  endif()
endfunction()

function(check_same name)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/straight.safetensors" "${WORK}/${name}.safetensors"
                  RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${name}: the new run over the shared local root differs from an uninterrupted seed-2 run")
  endif()
endfunction()

set(local --local-dir "${WORK}/local" --ranks-per-node 2)
train(--steps 50 --seed 2 --ckpt-dir "${WORK}/straight" --params-out "${WORK}/straight.safetensors")
train(--steps 100 --seed 1 ${local} --ckpt-dir "${WORK}/runA")
file(STRINGS "${WORK}/runA/.ckpt-run-id" a)
# A new run, resumed: nothing of its own to resume, a fresh start.
train_new(--steps 50 --seed 2 ${local} --ckpt-dir "${WORK}/runB" --resume --params-out "${WORK}/runB.safetensors")
check_same(runB)
# A new run, not resumed: not refused ("already holds steps").
train_new(--steps 50 --seed 2 ${local} --ckpt-dir "${WORK}/runC" --params-out "${WORK}/runC.safetensors")
check_same(runC)
# Run A's folder deleted and made again: a new run.
file(REMOVE_RECURSE "${WORK}/runA")
train_new(--steps 50 --seed 2 ${local} --ckpt-dir "${WORK}/runA" --resume --params-out "${WORK}/runA-again.safetensors")
check_same(runA-again)

# Four runs' folders, the old run A's steps untouched.
file(STRINGS "${WORK}/runA/.ckpt-run-id" a_again)
file(STRINGS "${WORK}/runB/.ckpt-run-id" b)
file(STRINGS "${WORK}/runC/.ckpt-run-id" c)
set(ids ${a} ${a_again} ${b} ${c})
list(REMOVE_DUPLICATES ids)
list(LENGTH ids n)
if(NOT n EQUAL 4)
  message(FATAL_ERROR "four runs, but the ids ${a} ${a_again} ${b} ${c}")
endif()
foreach(k 0 1)
  foreach(folder "" "partner/")
    foreach(step 0000000075 0000000100)
      if(NOT EXISTS "${WORK}/local/run-${a}/node-${k}/${folder}step-${step}/model.safetensors.index.json")
        message(FATAL_ERROR "run A's step ${step} (node ${k}, ${folder}) was deleted by another run")
      endif()
    endforeach()
  endforeach()
endforeach()

file(REMOVE_RECURSE "${WORK}")

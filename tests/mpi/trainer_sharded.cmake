# Run with cmake -P by the test mlp_trainer_mpi_sharded: the example binary with --shard-optimizer
# (ZeRO-1: each rank keeps its slice of Adam's moments, saved as slices by the checkpoint manager), trained
# on 4 ranks to step 50 and resumed on 3 to 100, on 2 to 150 and, step 150 then damaged, in one
# process (no mpirun) from step 100 to 200,
# must end with the parameters of an uninterrupted sharded 4-rank run and of the replicated run,
# byte for byte; each rank must hold its share of the optimizer state, not all of it. The
# uninterrupted run's sliced steps are also checked with the ckpt tool when it is built.
# Inputs: MPIEXEC, TRAINER, WORK (a scratch folder, emptied first), TOOL (optional).
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(train ranks)
  if(ranks EQUAL 0)
    set(launch "${TRAINER}")
  else()
    set(launch "${MPIEXEC}" -np ${ranks} --allow-run-as-root --oversubscribe "${TRAINER}")
  endif()
  execute_process(COMMAND ${launch} --log-every 1000 --save-every 50 ${ARGN}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "mlp_trainer_mpi -np ${ranks} ${ARGN} failed (${code}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

train(4 --steps 200 --ckpt-dir "${WORK}/replicated" --params-out "${WORK}/replicated.safetensors")
train(4 --steps 200 --shard-optimizer --keep 2 --ckpt-dir "${WORK}/straight" --params-out "${WORK}/straight.safetensors")
# 32 hidden units: 2 x 4 x (32 x 2 + 32 + 2 x 32 + 2) = 1296 bytes of moments, split over 4 ranks.
if(NOT output MATCHES "optimizer state per rank \\(bytes\\): 320 328 320 328 \\(replicated: 1296\\)")
  message(FATAL_ERROR "the sharded run does not hold 1/4 of the moments per rank:\n${output}")
endif()
# The manager's retention keeps the newest 2 of the 4 sliced steps (saved in the background).
file(GLOB kept RELATIVE "${WORK}/straight" "${WORK}/straight/step-*")
if(NOT kept STREQUAL "step-0000000150;step-0000000200")
  message(FATAL_ERROR "the sharded run with --keep 2 kept ${kept}, not steps 150 and 200")
endif()
# The sliced steps of the 4-rank run, through the ckpt tool (when built): verify checks every
# step's digest; each step folder is a Hugging Face sharded checkpoint whose index's total_size is
# the bytes inspect counts, and whose shard says format=pt.
if(TOOL)
  execute_process(COMMAND "${TOOL}" verify "${WORK}/straight" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "ok, digest verified" verified "${out}")
  list(LENGTH verified n)
  if(NOT code EQUAL 0 OR NOT n EQUAL 2)
    message(FATAL_ERROR "ckpt verify of the sliced run (${code}) did not verify its 2 steps:\n${out}\n${err}")
  endif()
  file(GLOB step "${WORK}/straight/*200")
  execute_process(COMMAND "${TOOL}" inspect --json "${step}" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(READ "${step}/model.safetensors.index.json" index)
  string(JSON total GET "${index}" metadata total_size)
  string(JSON bytes GET "${out}" total bytes)
  string(JSON format GET "${out}" metadata format)
  if(NOT code EQUAL 0 OR NOT total EQUAL bytes OR NOT format STREQUAL "pt")
    message(FATAL_ERROR "ckpt inspect of a sliced step (${code}): total_size ${total}, bytes ${bytes}, "
                        "format '${format}':\n${out}\n${err}")
  endif()
endif()
train(4 --steps 50 --shard-optimizer --ckpt-dir "${WORK}/chain")
train(3 --steps 100 --shard-optimizer --ckpt-dir "${WORK}/chain" --resume)
train(2 --steps 150 --shard-optimizer --ckpt-dir "${WORK}/chain" --resume)
# Step 150's shard cut to a few bytes: the last leg skips it (set aside) and resumes at step 100.
file(GLOB shard "${WORK}/chain/*150/model-00001-of-00001.safetensors")
if(NOT shard)
  message(FATAL_ERROR "no shard of step 150 in ${WORK}/chain")
endif()
file(WRITE "${shard}" "cut")
train(0 --steps 200 --shard-optimizer --ckpt-dir "${WORK}/chain" --resume --params-out "${WORK}/chain.safetensors")
if(NOT output MATCHES "skipped damaged step 150: [^\n]*model-00001-of-00001.safetensors" OR
   NOT output MATCHES "resumed at step 100 on 1 ranks")
  message(FATAL_ERROR "the last leg did not skip the damaged step 150 and resume at step 100:\n${output}")
endif()

foreach(run straight chain)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/replicated.safetensors" "${WORK}/${run}.safetensors"
                  RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${run}.safetensors differs from the replicated run's parameters")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")

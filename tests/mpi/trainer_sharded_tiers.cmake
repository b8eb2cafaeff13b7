# Run with cmake -P by the test mlp_trainer_mpi_sharded_tiers: the example binary with
# --shard-optimizer (ZeRO-1: steps of slices) and multi-level checkpoints (--local-dir, 2 simulated
# nodes of 2 ranks, every second saved step drained to --ckpt-dir), trained on 4 ranks to step 75
# (steps 25, 50, 75 saved; only 50 drained), then node 0 lost (its local folder removed): the
# resume must come from node 1's copies of the ranks' parts of step 75 (node 0's parts from its
# partner copies), say so, and go on to step 150 with the parameters of an uninterrupted sharded
# run. Then both nodes lost: 2 ranks resume from the shared folder's step 150 (the one file of
# slices) to step 200, again equal to the uninterrupted run, byte for byte.
# Inputs: MPIEXEC, TRAINER, WORK (a scratch folder, emptied first), TOOL (optional).
include("${CMAKE_CURRENT_LIST_DIR}/trainer_common.cmake")

set(tiers --shard-optimizer --local-dir "${WORK}/local" --ranks-per-node 2 --drain-every 2 --ckpt-dir "${WORK}/shared")
foreach(steps 150 200)
  train(--shard-optimizer --steps ${steps} --ckpt-dir "${WORK}/straight-${steps}" --params-out "${WORK}/straight-${steps}.safetensors")
endforeach()
train(--steps 75 ${tiers})
file(STRINGS "${WORK}/shared/.ckpt-run-id" id)
# Each rank's part of step 75 is in its node's folder, and the other node's in its partner folder.
file(GLOB own RELATIVE "${WORK}/local/run-${id}/node-0/step-0000000075" "${WORK}/local/run-${id}/node-0/step-0000000075/*")
file(GLOB partner RELATIVE "${WORK}/local/run-${id}/node-0/partner/step-0000000075"
     "${WORK}/local/run-${id}/node-0/partner/step-0000000075/*")
if(NOT own STREQUAL "model.safetensors.index.json;part-00001-of-00004.safetensors;part-00002-of-00004.safetensors" OR
   NOT partner STREQUAL "model.safetensors.index.json;part-00003-of-00004.safetensors;part-00004-of-00004.safetensors")
  message(FATAL_ERROR "node 0 holds ${own} and as partner copies ${partner} of step 75")
endif()
# The tool (when built) on the parts: verify of node 0's folder checks the parts it holds, its own
# and its partner copies; verify of the run with --local-dir says the tiers restore step 75
# (not drained) from the nodes' own parts, and once node 0 is lost with the partner copies.
verify_says("${WORK}/local/run-${id}/node-0"
            "node-0/step-0*75: ok, holds parts 1, 2 of 4, digests of 2 parts verified\n[^\n]*node-0/partner/step-0*75: ok, holds the partner copies of parts 3, 4 of 4, digests of 2 parts verified\n")
verify_says("${WORK}/shared" --local-dir "${WORK}/local"
            "\nstep 50: restorable from the node-local tier, the shared tier\nstep 75: restorable from the node-local tier\n$")
file(REMOVE_RECURSE "${WORK}/local/run-${id}/node-0")
verify_says("${WORK}/shared" --local-dir "${WORK}/local" "\nstep 75: restorable from the node-local tier with its partner copies\n$")
train(--steps 150 ${tiers} --resume --params-out "${WORK}/resumed.safetensors")
foreach(line "part-00001-of-00004.safetensors from the partner tier of node 1"
             "part-00002-of-00004.safetensors from the partner tier of node 1"
             "part-00003-of-00004.safetensors from the local tier of node 1"
             "part-00004-of-00004.safetensors from the local tier of node 1")
  expect("restored step 75: ${line}\n" "the resume after node 0's loss did not say 'restored step 75: ${line}'")
endforeach()
same_params("${WORK}/straight-150.safetensors" "${WORK}/resumed.safetensors"
            "the run resumed from the partner copies differs from the uninterrupted run")
# Steps 100 and 150 were drained as the one file of slices a run without tiers writes: the tool
# verifies them.
if(TOOL)
  execute_process(COMMAND "${TOOL}" verify "${WORK}/shared" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0 OR NOT out MATCHES "step-0000000150")
    message(FATAL_ERROR "ckpt verify of the drained steps (${code}):\n${out}\n${err}")
  endif()
endif()
# Both nodes lost, on 2 ranks: the shared folder's step 150 serves.
file(REMOVE_RECURSE "${WORK}/local")
set(train_ranks 2)
train(--steps 200 ${tiers} --resume --params-out "${WORK}/resumed-200.safetensors")
expect("restored step 150: model-00001-of-00001.safetensors from the folder tier\n"
       "the resume with both nodes lost did not come from the shared folder")
same_params("${WORK}/straight-200.safetensors" "${WORK}/resumed-200.safetensors"
            "the run resumed on 2 ranks from the shared folder differs from the uninterrupted run")
file(REMOVE_RECURSE "${WORK}")

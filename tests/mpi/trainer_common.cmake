# What the scripts trainer_tiers.cmake and trainer_runs.cmake share (each includes it first): the
# scratch folder WORK emptied, and train(ARGS...), which runs the example binary TRAINER on 4 ranks
# with MPIEXEC, saving every 25 steps, fails the test if it fails, and leaves its stdout in `output`.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(train)
  execute_process(
    COMMAND "${MPIEXEC}" -np 4 --allow-run-as-root --oversubscribe "${TRAINER}" --log-every 1000 --save-every 25 ${ARGN}
    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "mlp_trainer_mpi ${ARGN} failed (${code}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

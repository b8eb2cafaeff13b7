# What the scripts trainer_tiers.cmake, trainer_sharded_tiers.cmake and trainer_runs.cmake share
# (each includes it first): the
# scratch folder WORK emptied, and train(ARGS...), which runs the example binary TRAINER on
# `train_ranks` ranks (4 unless the script sets another) with MPIEXEC, saving every 25 steps, fails
# the test if it fails, and leaves its stdout in `output`; expect(REGEX WHAT), which fails the test
# unless `output` matches REGEX (saying that WHAT did not happen); same_params(A B WHAT), which
# fails it unless the parameter files A and B are equal byte for byte; and verify_says(ARGS...
# REGEX), which, when the tool is built (TOOL), fails it unless `ckpt verify ARGS...` exits 0 and
# its output matches REGEX.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(train_ranks 4)

function(train)
  execute_process(
    COMMAND "${MPIEXEC}" -np ${train_ranks} --allow-run-as-root --oversubscribe "${TRAINER}" --log-every 1000
            --save-every 25 ${ARGN}
    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "mlp_trainer_mpi ${ARGN} failed (${code}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

function(expect regex what)
  if(NOT output MATCHES "${regex}")
    message(FATAL_ERROR "${what}:\n${output}")
  endif()
endfunction()

function(verify_says)
  if(NOT TOOL)
    return()
  endif()
  set(args ${ARGN})
  list(POP_BACK args said)
  execute_process(COMMAND "${TOOL}" verify ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0 OR NOT out MATCHES "${said}")
    message(FATAL_ERROR "ckpt verify ${args} did not say '${said}' (exit ${code}):\n${out}${err}")
  endif()
endfunction()

function(same_params a b what)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${a}" "${b}" RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${what}")
  endif()
endfunction()

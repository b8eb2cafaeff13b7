# Run with cmake -P by the test mpi_tiers_kill: a 4-rank job (2 simulated nodes) with a local tier
# saves steps 1 and 2, then its last rank is SIGKILLed during step 3's local write, during the
# write of a partner copy it receives, and (a third job) during the drain to the shared folder;
# mpirun must fail, and a new 4-rank job must restore the newest committed step and go on.
# Inputs: MPIEXEC, PROGRAM, WORK (a scratch folder, emptied first).
cmake_minimum_required(VERSION 3.25)
foreach(where IN ITEMS local partner drain)
  file(REMOVE_RECURSE "${WORK}")
  file(MAKE_DIRECTORY "${WORK}")
  execute_process(COMMAND "${MPIEXEC}" -np 4 --allow-run-as-root --oversubscribe "${PROGRAM}" save "${WORK}" ${where}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(code EQUAL 0)
    message(FATAL_ERROR "the job whose rank was killed in the ${where} write succeeded:\n${out}\n${err}")
  endif()
  execute_process(COMMAND "${MPIEXEC}" -np 4 --allow-run-as-root --oversubscribe "${PROGRAM}" check "${WORK}" ${where}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "after a kill in the ${where} write, the tiers are wrong (${code}):\n${out}\n${err}")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")

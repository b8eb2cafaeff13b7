# Run with cmake -P by the test mpi_sliced_kill: a 4-rank job saves step 1 with
# ckpt::mpi::save of slices (ckpt::mpi::sliced), then its last rank is SIGKILLed during the collective write of step 2;
# mpirun must fail, and one process must then find step 1 intact and step 2 not committed.
# Inputs: MPIEXEC, PROGRAM, WORK (a scratch folder, emptied first).
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${MPIEXEC}" -np 4 --allow-run-as-root --oversubscribe "${PROGRAM}" save "${WORK}/steps"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(code EQUAL 0)
  message(FATAL_ERROR "the job whose rank was killed succeeded:\n${out}\n${err}")
endif()
execute_process(COMMAND "${PROGRAM}" check "${WORK}/steps" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the folder after the kill is wrong (${code}):\n${out}\n${err}")
endif()
file(REMOVE_RECURSE "${WORK}")

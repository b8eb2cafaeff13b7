# Run with cmake -P by the test mlp_trainer_mpi_resume: the example binary, trained on 4 ranks and
# stopped, then resumed on 4 ranks and, from the same checkpoint, on 3 ranks, and trained on 3 ranks
# and resumed on 2, must end with the same parameter bytes as an uninterrupted 4-rank run (the
# ordered reduction, its 8 groups split unevenly over 3 ranks; see data_parallel.hpp).
# Inputs: MPIEXEC, TRAINER, WORK (a scratch folder, emptied first).
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(train ranks)
  execute_process(
    COMMAND "${MPIEXEC}" -np ${ranks} --allow-run-as-root --oversubscribe "${TRAINER}" --log-every 1000 --save-every 100 ${ARGN}
    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "mlp_trainer_mpi -np ${ranks} ${ARGN} failed (${code}):\n${out}\n${err}")
  endif()
endfunction()

train(4 --steps 200 --ckpt-dir "${WORK}/straight" --params-out "${WORK}/straight.safetensors")
train(4 --steps 100 --ckpt-dir "${WORK}/stopped" --params-out "${WORK}/stopped.safetensors")
# The same checkpoint resumed twice: copy it first, since a resume adds steps to its folder.
file(COPY "${WORK}/stopped/" DESTINATION "${WORK}/stopped-copy")
train(4 --steps 200 --ckpt-dir "${WORK}/stopped" --resume --params-out "${WORK}/resumed4to4.safetensors")
train(3 --steps 200 --ckpt-dir "${WORK}/stopped-copy" --resume --params-out "${WORK}/resumed4to3.safetensors")
train(3 --steps 100 --ckpt-dir "${WORK}/stopped3")
train(2 --steps 200 --ckpt-dir "${WORK}/stopped3" --resume --params-out "${WORK}/resumed3to2.safetensors")

foreach(resumed resumed4to4 resumed4to3 resumed3to2)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/straight.safetensors" "${WORK}/${resumed}.safetensors"
                  RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${resumed}.safetensors differs from the uninterrupted run's parameters")
  endif()
endforeach()
# Not trivially: the resumed steps moved the parameters away from where the stopped run left them.
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/straight.safetensors" "${WORK}/stopped.safetensors"
                RESULT_VARIABLE differ)
if(differ EQUAL 0)
  message(FATAL_ERROR "200 steps ended where 100 did: the comparison proves nothing")
endif()
file(REMOVE_RECURSE "${WORK}")

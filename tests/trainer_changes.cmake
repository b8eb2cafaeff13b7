# examples/mlp_trainer run as a program when the model changes: --resume --adapt, --init-from and
# --params-out (test_trainer_changes.cpp). Included by tests/CMakeLists.txt.
if(TARGET mlp_trainer)
  ckpt_add_test(test_trainer_changes IN core test_trainer_changes.cpp)  # CKPT_MLP_TRAINER: tests/CMakeLists.txt
endif()

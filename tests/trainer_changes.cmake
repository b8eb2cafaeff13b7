# examples/mlp_trainer run as a program when the model changes: --resume --adapt, --init-from and
# --params-out (test_trainer_changes.cpp). Included by tests/CMakeLists.txt.
if(TARGET mlp_trainer)
  ckpt_add_test(test_trainer_changes test_trainer_changes.cpp)
  target_include_directories(test_trainer_changes PRIVATE ${PROJECT_SOURCE_DIR}/examples/mlp_trainer)
  target_compile_definitions(test_trainer_changes PRIVATE CKPT_MLP_TRAINER="$<TARGET_FILE:mlp_trainer>")
  add_dependencies(test_trainer_changes mlp_trainer)
endif()

# Core types, framework, fragmentation measure and placement policies.
target_sources(gpupool_sched PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cluster_state.cc
  ${CMAKE_CURRENT_LIST_DIR}/fragmentation.cc
  ${CMAKE_CURRENT_LIST_DIR}/framework.cc
  ${CMAKE_CURRENT_LIST_DIR}/node_index.cc
  ${CMAKE_CURRENT_LIST_DIR}/resources.cc
  ${CMAKE_CURRENT_LIST_DIR}/task.cc
  ${CMAKE_CURRENT_LIST_DIR}/placement/builtin_policies.cc
  ${CMAKE_CURRENT_LIST_DIR}/placement/fgd_score.cc
  ${CMAKE_CURRENT_LIST_DIR}/placement/gpu_choice.cc
  ${CMAKE_CURRENT_LIST_DIR}/placement/simple_scores.cc)

gpupool_test(sched_core_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/core_types_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/mig_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/fragmentation_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/node_index_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/placement/fgd_score_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/placement/policies_test.cc
  LIBS gpupool_sched)

# The CSV reader, trace readers, curves, MIG layouts and the saturation experiment.
target_sources(gpupool_sim PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/campaign.cc
  ${CMAKE_CURRENT_LIST_DIR}/csv_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/curves.cc
  ${CMAKE_CURRENT_LIST_DIR}/mig_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/openb_reader.cc
  ${CMAKE_CURRENT_LIST_DIR}/result_files.cc
  ${CMAKE_CURRENT_LIST_DIR}/saturation.cc
  ${CMAKE_CURRENT_LIST_DIR}/svg_plot.cc)

gpupool_test(sim_core_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/csv_table_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/mig_layout_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/openb_reader_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/saturation_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/svg_plot_test.cc
  LIBS gpupool_sim)

gpupool_test(sim_published_band_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/published_band_test.cc
  LIBS gpupool_sim
  LABELS slow)

# Trace readers, curves and the saturation experiment.
target_sources(gpupool_sim PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/campaign.cc
  ${CMAKE_CURRENT_LIST_DIR}/csv_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/curves.cc
  ${CMAKE_CURRENT_LIST_DIR}/openb_reader.cc
  ${CMAKE_CURRENT_LIST_DIR}/result_files.cc
  ${CMAKE_CURRENT_LIST_DIR}/saturation.cc)

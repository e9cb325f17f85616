target_sources(gpupool_sim PRIVATE placeholder.cc)

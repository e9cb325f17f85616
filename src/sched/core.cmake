target_sources(gpupool_sched PRIVATE placeholder.cc)

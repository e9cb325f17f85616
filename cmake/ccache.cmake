# ccache, when installed (issue 13). Must be included before any target is defined.
# Set through the launcher so that a user's own ccache.conf (cache size, cache directory)
# still applies. Switch off with -DGPUPOOL_CCACHE=OFF; a CMAKE_<LANG>_COMPILER_LAUNCHER
# given on the command line wins.
option(GPUPOOL_CCACHE "Compile through ccache when it is installed" ON)

if(GPUPOOL_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER AND NOT CMAKE_C_COMPILER_LAUNCHER)
  find_program(GPUPOOL_CCACHE_PROGRAM ccache)
  if(GPUPOOL_CCACHE_PROGRAM)
    set(CMAKE_C_COMPILER_LAUNCHER ${GPUPOOL_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${GPUPOOL_CCACHE_PROGRAM})
    message(STATUS "gpupool: compiling through ${GPUPOOL_CCACHE_PROGRAM}")
  else()
    message(STATUS "gpupool: ccache not found, compiling without it")
  endif()
endif()

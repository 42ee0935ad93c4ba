
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/backends/nanosleep.c" "backends/CMakeFiles/rperf_backends.dir/nanosleep.c.o" "gcc" "backends/CMakeFiles/rperf_backends.dir/nanosleep.c.o.d"
  "/work/main/backends/registry.c" "backends/CMakeFiles/rperf_backends.dir/registry.c.o" "gcc" "backends/CMakeFiles/rperf_backends.dir/registry.c.o.d"
  "/work/main/backends/signal.c" "backends/CMakeFiles/rperf_backends.dir/signal.c.o" "gcc" "backends/CMakeFiles/rperf_backends.dir/signal.c.o.d"
  "/work/main/backends/tick_signal.c" "backends/CMakeFiles/rperf_backends.dir/tick_signal.c.o" "gcc" "backends/CMakeFiles/rperf_backends.dir/tick_signal.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build2/core/CMakeFiles/rperf_core.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")

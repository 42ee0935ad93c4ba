
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/core/aggregate.c" "core/CMakeFiles/rperf_core.dir/aggregate.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/aggregate.c.o.d"
  "/work/main/core/alloc.c" "core/CMakeFiles/rperf_core.dir/alloc.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/alloc.c.o.d"
  "/work/main/core/engine.c" "core/CMakeFiles/rperf_core.dir/engine.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/engine.c.o.d"
  "/work/main/core/frame_table.c" "core/CMakeFiles/rperf_core.dir/frame_table.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/frame_table.c.o.d"
  "/work/main/core/ring.c" "core/CMakeFiles/rperf_core.dir/ring.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/ring.c.o.d"
  "/work/main/core/thread_index.c" "core/CMakeFiles/rperf_core.dir/thread_index.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/thread_index.c.o.d"
  "/work/main/core/thread_info.c" "core/CMakeFiles/rperf_core.dir/thread_info.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/thread_info.c.o.d"
  "/work/main/core/thread_state.c" "core/CMakeFiles/rperf_core.dir/thread_state.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/thread_state.c.o.d"
  "/work/main/core/worker.c" "core/CMakeFiles/rperf_core.dir/worker.c.o" "gcc" "core/CMakeFiles/rperf_core.dir/worker.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")

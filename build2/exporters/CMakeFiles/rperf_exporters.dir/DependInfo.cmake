
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/exporters/collapsed.c" "exporters/CMakeFiles/rperf_exporters.dir/collapsed.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/collapsed.c.o.d"
  "/work/main/exporters/example_threads.c" "exporters/CMakeFiles/rperf_exporters.dir/example_threads.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/example_threads.c.o.d"
  "/work/main/exporters/html.c" "exporters/CMakeFiles/rperf_exporters.dir/html.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/html.c.o.d"
  "/work/main/exporters/json.c" "exporters/CMakeFiles/rperf_exporters.dir/json.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/json.c.o.d"
  "/work/main/exporters/pprof.c" "exporters/CMakeFiles/rperf_exporters.dir/pprof.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/pprof.c.o.d"
  "/work/main/exporters/pprof_decode.c" "exporters/CMakeFiles/rperf_exporters.dir/pprof_decode.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/pprof_decode.c.o.d"
  "/work/main/exporters/registry.c" "exporters/CMakeFiles/rperf_exporters.dir/registry.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/registry.c.o.d"
  "/work/main/exporters/run.c" "exporters/CMakeFiles/rperf_exporters.dir/run.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/run.c.o.d"
  "/work/main/exporters/text.c" "exporters/CMakeFiles/rperf_exporters.dir/text.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/text.c.o.d"
  "/work/main/exporters/util.c" "exporters/CMakeFiles/rperf_exporters.dir/util.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/util.c.o.d"
  "/work/main/exporters/writer.c" "exporters/CMakeFiles/rperf_exporters.dir/writer.c.o" "gcc" "exporters/CMakeFiles/rperf_exporters.dir/writer.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")


# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/ruby/api.c" "ruby/CMakeFiles/rperf.dir/api.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/api.c.o.d"
  "/work/main/ruby/capture.c" "ruby/CMakeFiles/rperf.dir/capture.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/capture.c.o.d"
  "/work/main/ruby/decode.c" "ruby/CMakeFiles/rperf.dir/decode.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/decode.c.o.d"
  "/work/main/ruby/export.c" "ruby/CMakeFiles/rperf.dir/export.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/export.c.o.d"
  "/work/main/ruby/export_engine.c" "ruby/CMakeFiles/rperf.dir/export_engine.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/export_engine.c.o.d"
  "/work/main/ruby/hooks.c" "ruby/CMakeFiles/rperf.dir/hooks.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/hooks.c.o.d"
  "/work/main/ruby/init.c" "ruby/CMakeFiles/rperf.dir/init.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/init.c.o.d"
  "/work/main/ruby/label_table.c" "ruby/CMakeFiles/rperf.dir/label_table.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/label_table.c.o.d"
  "/work/main/ruby/labels.c" "ruby/CMakeFiles/rperf.dir/labels.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/labels.c.o.d"
  "/work/main/ruby/ractor.c" "ruby/CMakeFiles/rperf.dir/ractor.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/ractor.c.o.d"
  "/work/main/ruby/result.c" "ruby/CMakeFiles/rperf.dir/result.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/result.c.o.d"
  "/work/main/ruby/signals.c" "ruby/CMakeFiles/rperf.dir/signals.c.o" "gcc" "ruby/CMakeFiles/rperf.dir/signals.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build2/exporters/CMakeFiles/rperf_exporters.dir/DependInfo.cmake"
  "/work/main/build2/backends/CMakeFiles/rperf_backends.dir/DependInfo.cmake"
  "/work/main/build2/core/CMakeFiles/rperf_core.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")

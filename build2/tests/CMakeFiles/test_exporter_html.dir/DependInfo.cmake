
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tests/unit/test_exporter_html.c" "tests/CMakeFiles/test_exporter_html.dir/unit/test_exporter_html.c.o" "gcc" "tests/CMakeFiles/test_exporter_html.dir/unit/test_exporter_html.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build2/exporters/CMakeFiles/rperf_exporters.dir/DependInfo.cmake"
  "/work/main/build2/backends/CMakeFiles/rperf_backends.dir/DependInfo.cmake"
  "/work/main/build2/core/CMakeFiles/rperf_core.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")

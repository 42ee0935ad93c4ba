file(REMOVE_RECURSE
  "CMakeFiles/rperf_exporters.dir/collapsed.c.o"
  "CMakeFiles/rperf_exporters.dir/collapsed.c.o.d"
  "CMakeFiles/rperf_exporters.dir/example_threads.c.o"
  "CMakeFiles/rperf_exporters.dir/example_threads.c.o.d"
  "CMakeFiles/rperf_exporters.dir/html.c.o"
  "CMakeFiles/rperf_exporters.dir/html.c.o.d"
  "CMakeFiles/rperf_exporters.dir/json.c.o"
  "CMakeFiles/rperf_exporters.dir/json.c.o.d"
  "CMakeFiles/rperf_exporters.dir/pprof.c.o"
  "CMakeFiles/rperf_exporters.dir/pprof.c.o.d"
  "CMakeFiles/rperf_exporters.dir/pprof_decode.c.o"
  "CMakeFiles/rperf_exporters.dir/pprof_decode.c.o.d"
  "CMakeFiles/rperf_exporters.dir/registry.c.o"
  "CMakeFiles/rperf_exporters.dir/registry.c.o.d"
  "CMakeFiles/rperf_exporters.dir/run.c.o"
  "CMakeFiles/rperf_exporters.dir/run.c.o.d"
  "CMakeFiles/rperf_exporters.dir/text.c.o"
  "CMakeFiles/rperf_exporters.dir/text.c.o.d"
  "CMakeFiles/rperf_exporters.dir/util.c.o"
  "CMakeFiles/rperf_exporters.dir/util.c.o.d"
  "CMakeFiles/rperf_exporters.dir/writer.c.o"
  "CMakeFiles/rperf_exporters.dir/writer.c.o.d"
  "librperf_exporters.a"
  "librperf_exporters.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/rperf_exporters.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

file(REMOVE_RECURSE
  "../lib/rperf.pdb"
  "../lib/rperf.so"
  "CMakeFiles/rperf.dir/api.c.o"
  "CMakeFiles/rperf.dir/api.c.o.d"
  "CMakeFiles/rperf.dir/capture.c.o"
  "CMakeFiles/rperf.dir/capture.c.o.d"
  "CMakeFiles/rperf.dir/decode.c.o"
  "CMakeFiles/rperf.dir/decode.c.o.d"
  "CMakeFiles/rperf.dir/export.c.o"
  "CMakeFiles/rperf.dir/export.c.o.d"
  "CMakeFiles/rperf.dir/export_engine.c.o"
  "CMakeFiles/rperf.dir/export_engine.c.o.d"
  "CMakeFiles/rperf.dir/hooks.c.o"
  "CMakeFiles/rperf.dir/hooks.c.o.d"
  "CMakeFiles/rperf.dir/init.c.o"
  "CMakeFiles/rperf.dir/init.c.o.d"
  "CMakeFiles/rperf.dir/label_table.c.o"
  "CMakeFiles/rperf.dir/label_table.c.o.d"
  "CMakeFiles/rperf.dir/labels.c.o"
  "CMakeFiles/rperf.dir/labels.c.o.d"
  "CMakeFiles/rperf.dir/ractor.c.o"
  "CMakeFiles/rperf.dir/ractor.c.o.d"
  "CMakeFiles/rperf.dir/result.c.o"
  "CMakeFiles/rperf.dir/result.c.o.d"
  "CMakeFiles/rperf.dir/signals.c.o"
  "CMakeFiles/rperf.dir/signals.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/rperf.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

file(REMOVE_RECURSE
  "CMakeFiles/test_exporter_pprof.dir/unit/test_exporter_pprof.c.o"
  "CMakeFiles/test_exporter_pprof.dir/unit/test_exporter_pprof.c.o.d"
  "test_exporter_pprof"
  "test_exporter_pprof.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_exporter_pprof.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

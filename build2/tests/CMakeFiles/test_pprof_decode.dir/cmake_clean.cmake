file(REMOVE_RECURSE
  "CMakeFiles/test_pprof_decode.dir/unit/test_pprof_decode.c.o"
  "CMakeFiles/test_pprof_decode.dir/unit/test_pprof_decode.c.o.d"
  "test_pprof_decode"
  "test_pprof_decode.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_pprof_decode.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

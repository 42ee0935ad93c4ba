file(REMOVE_RECURSE
  "CMakeFiles/rperf_backends.dir/nanosleep.c.o"
  "CMakeFiles/rperf_backends.dir/nanosleep.c.o.d"
  "CMakeFiles/rperf_backends.dir/registry.c.o"
  "CMakeFiles/rperf_backends.dir/registry.c.o.d"
  "CMakeFiles/rperf_backends.dir/signal.c.o"
  "CMakeFiles/rperf_backends.dir/signal.c.o.d"
  "CMakeFiles/rperf_backends.dir/tick_signal.c.o"
  "CMakeFiles/rperf_backends.dir/tick_signal.c.o.d"
  "librperf_backends.a"
  "librperf_backends.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/rperf_backends.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

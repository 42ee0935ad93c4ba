file(REMOVE_RECURSE
  "CMakeFiles/rperf_core.dir/aggregate.c.o"
  "CMakeFiles/rperf_core.dir/aggregate.c.o.d"
  "CMakeFiles/rperf_core.dir/alloc.c.o"
  "CMakeFiles/rperf_core.dir/alloc.c.o.d"
  "CMakeFiles/rperf_core.dir/engine.c.o"
  "CMakeFiles/rperf_core.dir/engine.c.o.d"
  "CMakeFiles/rperf_core.dir/frame_table.c.o"
  "CMakeFiles/rperf_core.dir/frame_table.c.o.d"
  "CMakeFiles/rperf_core.dir/ring.c.o"
  "CMakeFiles/rperf_core.dir/ring.c.o.d"
  "CMakeFiles/rperf_core.dir/thread_index.c.o"
  "CMakeFiles/rperf_core.dir/thread_index.c.o.d"
  "CMakeFiles/rperf_core.dir/thread_info.c.o"
  "CMakeFiles/rperf_core.dir/thread_info.c.o.d"
  "CMakeFiles/rperf_core.dir/thread_state.c.o"
  "CMakeFiles/rperf_core.dir/thread_state.c.o.d"
  "CMakeFiles/rperf_core.dir/worker.c.o"
  "CMakeFiles/rperf_core.dir/worker.c.o.d"
  "librperf_core.a"
  "librperf_core.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/rperf_core.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

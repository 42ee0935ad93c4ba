file(REMOVE_RECURSE
  "CMakeFiles/test_ring_concurrency.dir/unit/test_ring_concurrency.c.o"
  "CMakeFiles/test_ring_concurrency.dir/unit/test_ring_concurrency.c.o.d"
  "test_ring_concurrency"
  "test_ring_concurrency.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_ring_concurrency.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

file(REMOVE_RECURSE
  "CMakeFiles/test_thread_lifecycle.dir/unit/test_thread_lifecycle.c.o"
  "CMakeFiles/test_thread_lifecycle.dir/unit/test_thread_lifecycle.c.o.d"
  "test_thread_lifecycle"
  "test_thread_lifecycle.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_thread_lifecycle.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

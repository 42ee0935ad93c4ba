file(REMOVE_RECURSE
  "CMakeFiles/test_fork.dir/unit/test_fork.c.o"
  "CMakeFiles/test_fork.dir/unit/test_fork.c.o.d"
  "test_fork"
  "test_fork.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_fork.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

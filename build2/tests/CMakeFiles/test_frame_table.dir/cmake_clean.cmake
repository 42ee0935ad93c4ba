file(REMOVE_RECURSE
  "CMakeFiles/test_frame_table.dir/unit/test_frame_table.c.o"
  "CMakeFiles/test_frame_table.dir/unit/test_frame_table.c.o.d"
  "test_frame_table"
  "test_frame_table.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_frame_table.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

file(REMOVE_RECURSE
  "CMakeFiles/test_exporter_writer.dir/unit/test_exporter_writer.c.o"
  "CMakeFiles/test_exporter_writer.dir/unit/test_exporter_writer.c.o.d"
  "test_exporter_writer"
  "test_exporter_writer.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_exporter_writer.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

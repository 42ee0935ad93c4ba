file(REMOVE_RECURSE
  "CMakeFiles/test_exporter_formats.dir/unit/test_exporter_formats.c.o"
  "CMakeFiles/test_exporter_formats.dir/unit/test_exporter_formats.c.o.d"
  "test_exporter_formats"
  "test_exporter_formats.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_exporter_formats.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

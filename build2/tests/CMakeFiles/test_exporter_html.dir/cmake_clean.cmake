file(REMOVE_RECURSE
  "CMakeFiles/test_exporter_html.dir/unit/test_exporter_html.c.o"
  "CMakeFiles/test_exporter_html.dir/unit/test_exporter_html.c.o.d"
  "test_exporter_html"
  "test_exporter_html.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_exporter_html.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

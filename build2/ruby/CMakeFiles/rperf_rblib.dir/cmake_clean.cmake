file(REMOVE_RECURSE
  "../lib/rperf.rb"
  "../lib/rperf/cli.rb"
  "../lib/rperf/exporters.rb"
  "../lib/rperf/middleware.rb"
  "../lib/rperf/report.rb"
  "CMakeFiles/rperf_rblib"
)

# Per-language clean rules from dependency scanning.
foreach(lang )
  include(CMakeFiles/rperf_rblib.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()

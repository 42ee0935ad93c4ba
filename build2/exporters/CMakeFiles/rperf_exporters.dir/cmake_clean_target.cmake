file(REMOVE_RECURSE
  "librperf_exporters.a"
)

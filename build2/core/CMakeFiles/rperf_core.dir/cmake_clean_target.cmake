file(REMOVE_RECURSE
  "librperf_core.a"
)

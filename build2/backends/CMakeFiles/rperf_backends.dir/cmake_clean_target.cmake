file(REMOVE_RECURSE
  "librperf_backends.a"
)

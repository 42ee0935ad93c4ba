# Empty custom commands generated dependencies file for rperf_rblib.
# This may be replaced when dependencies are built.

# Empty dependencies file for rperf_core.
# This may be replaced when dependencies are built.

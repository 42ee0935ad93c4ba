# Empty dependencies file for rperf_backends.
# This may be replaced when dependencies are built.

# Empty dependencies file for rperf_exporters.
# This may be replaced when dependencies are built.

# Empty dependencies file for rperf.
# This may be replaced when dependencies are built.

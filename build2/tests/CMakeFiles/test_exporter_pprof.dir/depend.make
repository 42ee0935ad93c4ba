# Empty dependencies file for test_exporter_pprof.
# This may be replaced when dependencies are built.

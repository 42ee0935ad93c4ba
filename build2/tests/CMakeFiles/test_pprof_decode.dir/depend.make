# Empty dependencies file for test_pprof_decode.
# This may be replaced when dependencies are built.

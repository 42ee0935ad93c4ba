# Empty dependencies file for test_ring_concurrency.
# This may be replaced when dependencies are built.

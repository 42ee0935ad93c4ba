# Empty dependencies file for test_thread_lifecycle.
# This may be replaced when dependencies are built.

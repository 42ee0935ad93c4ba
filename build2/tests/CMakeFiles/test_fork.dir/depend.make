# Empty dependencies file for test_fork.
# This may be replaced when dependencies are built.

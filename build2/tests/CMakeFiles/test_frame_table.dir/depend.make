# Empty dependencies file for test_frame_table.
# This may be replaced when dependencies are built.

# Empty dependencies file for test_exporter_writer.
# This may be replaced when dependencies are built.

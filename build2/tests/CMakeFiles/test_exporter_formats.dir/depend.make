# Empty dependencies file for test_exporter_formats.
# This may be replaced when dependencies are built.

# Empty dependencies file for test_exporter_html.
# This may be replaced when dependencies are built.

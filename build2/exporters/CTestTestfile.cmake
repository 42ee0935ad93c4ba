# CMake generated Testfile for 
# Source directory: /work/main/exporters
# Build directory: /work/main/build2/exporters
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.

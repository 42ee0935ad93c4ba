# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build2
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
subdirs("core")
subdirs("backends")
subdirs("exporters")
subdirs("ruby")
subdirs("tests")

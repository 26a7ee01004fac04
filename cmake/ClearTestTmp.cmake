# The setup test of every ctest run: an empty scratch directory for the tests
# (CMakeLists.txt, HETPAR_TEST_TMPDIR). Only ever the build tree's own test-tmp.
if(NOT DIR MATCHES "/test-tmp$")
  message(FATAL_ERROR "ClearTestTmp: refusing to empty '${DIR}' (not a build tree's test-tmp)")
endif()
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")

# -DHETPAR_BUNDLE=DIR: the C++ dependencies beyond LibTorch from a folder made by
# scripts/offline-bundle.sh (headers, static libraries, CMake configs), for machines without
# Debian's -dev packages and without internet. Searched before the system's copies.
set(HETPAR_BUNDLE "" CACHE PATH "folder from scripts/offline-bundle.sh, searched before the system")
if(HETPAR_BUNDLE)
  get_filename_component(HETPAR_BUNDLE "${HETPAR_BUNDLE}" ABSOLUTE)
  if(NOT EXISTS "${HETPAR_BUNDLE}/hetpar-bundle.txt")
    message(FATAL_ERROR "HETPAR_BUNDLE=${HETPAR_BUNDLE} is no folder made by scripts/offline-bundle.sh "
                        "(it has no hetpar-bundle.txt)")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${HETPAR_BUNDLE}")
  # Header-only pieces found by #include alone (gloo, for ProcessGroupGloo.hpp): the bundle's
  # include/ comes before the system's for every target.
  include_directories(BEFORE SYSTEM "${HETPAR_BUNDLE}/include")
  file(STRINGS "${HETPAR_BUNDLE}/hetpar-bundle.txt" _bundle_what REGEX "^[a-z]")
  list(JOIN _bundle_what ", " _bundle_what)
  message(STATUS "hetpar: C++ dependencies from the bundle ${HETPAR_BUNDLE} (${_bundle_what})")
endif()

# fmt: torch code uses the wheel's fmt header-only (FMT_HEADER_ONLY, see docs/design.md "Build").
# The torch-free hetpar_config takes the system's fmt when there is one, else the same wheel
# headers (the bundle carries no fmt).
macro(hetpar_find_fmt)
  find_package(fmt CONFIG QUIET)
  if(NOT fmt_FOUND)
    add_library(fmt::fmt INTERFACE IMPORTED)
    target_include_directories(fmt::fmt SYSTEM INTERFACE "${HETPAR_TORCH_ROOT}/include")
    target_compile_definitions(fmt::fmt INTERFACE FMT_HEADER_ONLY)
    message(STATUS "hetpar: no system fmt; hetpar_config uses the LibTorch's fmt headers, header-only")
  endif()
endmacro()

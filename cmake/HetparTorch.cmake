# Which LibTorch hetpar builds against, and what it needs to know about it.
#
# Two ways to name it (any LibTorch 2.11 ... 2.15):
#   -DHETPAR_PYTHON=/venv/bin/python   the torch importable by that python (the default: python3)
#   -DTorch_DIR=/.../torch/share/cmake/Torch   a LibTorch without running python; the wheel's
#                                     site-packages, its version and the venv's python are then
#                                     read from the files around it.
# Sets: TORCH_SITE_PACKAGES (the wheel's site-packages, "" for a LibTorch that is no wheel),
#       HETPAR_TORCH_ROOT (the directory holding include/ and lib/), HETPAR_TORCH_VERSION,
#       HETPAR_PYTHON_PREFIX ("" when no python goes with this LibTorch), HETPAR_WHEEL_LINK_FLAGS,
#       HETPAR_NCCL_INCLUDE_DIR (the nccl.h nccl_backend.cpp compiles against).

set(HETPAR_PYTHON "" CACHE FILEPATH
    "python of the venv holding the torch wheel (default python3; leave empty when Torch_DIR is given)")
set(HETPAR_NCCL_INCLUDE "" CACHE PATH
    "directory of the nccl.h matching the LibTorch's NCCL, when the torch wheel has none (nvidia/nccl/include)")

# python -> torch, or Torch_DIR alone. A Torch_DIR that find_package wrote back after a python
# configure is not a user's choice: remember it to tell the two apart on a re-configure.
if(HETPAR_PYTHON)
  set(_hetpar_torch_from python)
elseif(DEFINED Torch_DIR AND Torch_DIR AND NOT Torch_DIR STREQUAL "${_HETPAR_TORCH_DIR_FROM_PYTHON}")
  set(_hetpar_torch_from torch_dir)
else()
  set(_hetpar_torch_from python)
  set(HETPAR_PYTHON python3)
endif()

set(HETPAR_PYTHON_PREFIX "")
set(TORCH_SITE_PACKAGES "")
set(HETPAR_TORCH_VERSION "")
set(_hetpar_py_query
  "import torch, os, sys; print(torch.utils.cmake_prefix_path); print(os.path.dirname(os.path.dirname(torch.__file__))); print(torch.__version__); print(sys.prefix)")

if(_hetpar_torch_from STREQUAL "python")
  execute_process(COMMAND ${HETPAR_PYTHON} -c "${_hetpar_py_query}"
    OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc ERROR_QUIET)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "torch not importable by ${HETPAR_PYTHON}; run scripts/install-deps.sh (make deps), "
                        "or name a LibTorch with -DTorch_DIR=<site-packages>/torch/share/cmake/Torch")
  endif()
  string(REPLACE "\n" ";" _torch_info "${_torch_info}")
  list(GET _torch_info 0 _torch_cmake_prefix)
  list(GET _torch_info 1 TORCH_SITE_PACKAGES)
  list(GET _torch_info 2 HETPAR_TORCH_VERSION)
  list(GET _torch_info 3 HETPAR_PYTHON_PREFIX)
  # Always this python's torch, even where an earlier configure cached another Torch_DIR.
  set(Torch_DIR "${_torch_cmake_prefix}/Torch" CACHE PATH "LibTorch's TorchConfig.cmake directory" FORCE)
  set(_HETPAR_TORCH_DIR_FROM_PYTHON "${Torch_DIR}" CACHE INTERNAL "")
  set(HETPAR_TORCH_ROOT "${TORCH_SITE_PACKAGES}/torch")
else()
  get_filename_component(Torch_DIR "${Torch_DIR}" ABSOLUTE)
  if(NOT EXISTS "${Torch_DIR}/TorchConfig.cmake")
    message(FATAL_ERROR "Torch_DIR=${Torch_DIR} holds no TorchConfig.cmake (a wheel's is "
                        "<site-packages>/torch/share/cmake/Torch, LibTorch's libtorch/share/cmake/Torch)")
  endif()
  set(_HETPAR_TORCH_DIR_FROM_PYTHON "" CACHE INTERNAL "")
  get_filename_component(HETPAR_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)   # <root>/share/cmake/Torch
  if(EXISTS "${HETPAR_TORCH_ROOT}/__init__.py")                                  # a wheel: <sp>/torch
    get_filename_component(TORCH_SITE_PACKAGES "${HETPAR_TORCH_ROOT}/.." ABSOLUTE)
  endif()
  # The version as torch.__version__ spells it (the wheel's version.py), else the C++ header's.
  if(EXISTS "${HETPAR_TORCH_ROOT}/version.py")
    file(STRINGS "${HETPAR_TORCH_ROOT}/version.py" _v REGEX "^__version__ *= *['\"]")
    string(REGEX REPLACE "^__version__ *= *['\"]([^'\"]+)['\"].*" "\\1" HETPAR_TORCH_VERSION "${_v}")
  endif()
  if(NOT HETPAR_TORCH_VERSION)
    foreach(_h include/torch/headeronly/version.h include/torch/csrc/api/include/torch/version.h)
      if(EXISTS "${HETPAR_TORCH_ROOT}/${_h}" AND NOT HETPAR_TORCH_VERSION)
        file(STRINGS "${HETPAR_TORCH_ROOT}/${_h}" _v REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
        if(_v)
          string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
                 HETPAR_TORCH_VERSION "${_v}")
        endif()
      endif()
    endforeach()
  endif()
  # The venv around a wheel: <prefix>/lib/pythonX.Y/site-packages, <prefix>/bin/python. Used
  # only if it imports this very torch.
  if(TORCH_SITE_PACKAGES)
    get_filename_component(_prefix "${TORCH_SITE_PACKAGES}/../../.." ABSOLUTE)
    foreach(_py "${_prefix}/bin/python" "${_prefix}/bin/python3")
      if(EXISTS "${_py}" AND NOT HETPAR_PYTHON_PREFIX)
        execute_process(COMMAND ${_py} -c "${_hetpar_py_query}"
          OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc ERROR_QUIET)
        if(_torch_rc EQUAL 0)
          string(REPLACE "\n" ";" _torch_info "${_torch_info}")
          list(GET _torch_info 1 _sp)
          get_filename_component(_sp "${_sp}" REALPATH)
          get_filename_component(_sp_here "${TORCH_SITE_PACKAGES}" REALPATH)
          if(_sp STREQUAL _sp_here)
            list(GET _torch_info 3 HETPAR_PYTHON_PREFIX)
          endif()
        endif()
      endif()
    endforeach()
  endif()
  if(NOT HETPAR_PYTHON_PREFIX)
    message(WARNING "hetpar: no python imports the LibTorch of Torch_DIR=${Torch_DIR}: the Python "
                    "tests are disabled, the torchrun tests fail, and `hetpar sweep` draws no figures "
                    "unless HETPAR_PYTHON is set when it runs (give -DHETPAR_PYTHON=<venv python> instead)")
  endif()
endif()

if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch REQUIRED)
if(NOT HETPAR_TORCH_VERSION)
  set(HETPAR_TORCH_VERSION "${Torch_VERSION}")
endif()
if(HETPAR_TORCH_VERSION VERSION_LESS 2.11)
  message(FATAL_ERROR "hetpar needs LibTorch 2.11 or newer; Torch_DIR=${Torch_DIR} is ${HETPAR_TORCH_VERSION}")
endif()
if(HETPAR_PYTHON_PREFIX)
  set(_py_note "python ${HETPAR_PYTHON_PREFIX}/bin/python")
else()
  set(_py_note "no python")
endif()
message(STATUS "hetpar: LibTorch ${HETPAR_TORCH_VERSION} from ${HETPAR_TORCH_ROOT} (found by ${_hetpar_torch_from}; ${_py_note})")

# LibTorch 2.11's libtorch.so exports its own copy of libstdc++'s std::filesystem (2.15's does
# not). Linked before libstdc++, it wins at run time and std::filesystem::remove_all crashes
# (a call through a null pointer). Where it does, libstdc++ goes first on every link line.
execute_process(COMMAND ${CMAKE_NM} -D --defined-only "${HETPAR_TORCH_ROOT}/lib/libtorch.so"
  OUTPUT_VARIABLE _torch_syms ERROR_QUIET RESULT_VARIABLE _nm_rc)
string(FIND "${_torch_syms}" " T _ZNSt10filesystem" _fs_pos)
if(_nm_rc EQUAL 0 AND _fs_pos GREATER_EQUAL 0)
  add_link_options("SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
  message(STATUS "hetpar: libtorch.so exports std::filesystem: libstdc++ linked first")
endif()
unset(_torch_syms)

# Link the wheel's own CUDA libraries (its NCCL is newer than the toolkit's); a LibTorch
# that is no wheel carries its CUDA libraries in its own lib/.
set(HETPAR_WHEEL_LINK_FLAGS "")
foreach(dir ${TORCH_SITE_PACKAGES}/nvidia/nccl/lib ${TORCH_SITE_PACKAGES}/nvidia/cu13/lib ${HETPAR_TORCH_ROOT}/lib)
  if(IS_DIRECTORY "${dir}")
    list(APPEND HETPAR_WHEEL_LINK_FLAGS "-Wl,-rpath-link,${dir}" "-Wl,-rpath,${dir}")
  endif()
endforeach()

# ---- the nccl.h that matches the LibTorch's NCCL ------------------------------------------
# ProcessGroupNCCL::Options embeds ncclConfig_t, whose layout changes between NCCL versions:
# compiled against another nccl.h than the one the LibTorch runs with, its fields land at
# wrong offsets. The wheel's nvidia/nccl/include first; else the directory given.
function(_hetpar_nccl_version header out)
  file(STRINGS "${header}" _v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" _v "${_v}")
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()
set(_wheel_nccl "${TORCH_SITE_PACKAGES}/nvidia/nccl/include")
if(TORCH_SITE_PACKAGES AND EXISTS "${_wheel_nccl}/nccl.h")
  set(HETPAR_NCCL_INCLUDE_DIR "${_wheel_nccl}")
  if(HETPAR_NCCL_INCLUDE AND NOT HETPAR_NCCL_INCLUDE STREQUAL _wheel_nccl)
    message(STATUS "hetpar: HETPAR_NCCL_INCLUDE=${HETPAR_NCCL_INCLUDE} not used: the torch wheel has its own nccl.h")
  endif()
elseif(HETPAR_NCCL_INCLUDE)
  if(NOT EXISTS "${HETPAR_NCCL_INCLUDE}/nccl.h")
    message(FATAL_ERROR "HETPAR_NCCL_INCLUDE=${HETPAR_NCCL_INCLUDE} holds no nccl.h")
  endif()
  set(HETPAR_NCCL_INCLUDE_DIR "${HETPAR_NCCL_INCLUDE}")
else()
  message(FATAL_ERROR "hetpar: this LibTorch (${HETPAR_TORCH_ROOT}) comes without nccl.h "
    "(a torch wheel has it in nvidia/nccl/include). src/dist/nccl_backend.cpp must compile against "
    "the nccl.h of the NCCL version this LibTorch runs with: give its directory with "
    "-DHETPAR_NCCL_INCLUDE=<dir holding nccl.h>.")
endif()
_hetpar_nccl_version("${HETPAR_NCCL_INCLUDE_DIR}/nccl.h" HETPAR_NCCL_HEADER_VERSION)
# The NCCL the wheel installed beside torch (pip's record of nvidia-nccl-cu*), when known.
set(_nccl_runtime_version "")
if(TORCH_SITE_PACKAGES)
  file(GLOB _nccl_dist LIST_DIRECTORIES true "${TORCH_SITE_PACKAGES}/nvidia_nccl_cu*-*.dist-info")
  if(_nccl_dist)
    list(GET _nccl_dist 0 _nccl_dist)
    get_filename_component(_nccl_dist "${_nccl_dist}" NAME)
    string(REGEX REPLACE "^nvidia_nccl_cu[0-9]+-([0-9]+\\.[0-9]+\\.[0-9]+).*" "\\1" _nccl_runtime_version "${_nccl_dist}")
  endif()
endif()
if(_nccl_runtime_version)
  set(_nccl_note "the wheel's NCCL is ${_nccl_runtime_version}")
else()
  set(_nccl_note "the LibTorch's NCCL version is not known here: make sure it is this one")
endif()
message(STATUS "hetpar: nccl.h ${HETPAR_NCCL_HEADER_VERSION} from ${HETPAR_NCCL_INCLUDE_DIR}/nccl.h (${_nccl_note})")
if(_nccl_runtime_version AND NOT _nccl_runtime_version STREQUAL HETPAR_NCCL_HEADER_VERSION)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _h "${HETPAR_NCCL_HEADER_VERSION}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _r "${_nccl_runtime_version}")
  if(NOT _h STREQUAL _r)
    message(FATAL_ERROR "hetpar: nccl.h is NCCL ${HETPAR_NCCL_HEADER_VERSION} but the LibTorch runs with "
                        "NCCL ${_nccl_runtime_version}: ncclConfig_t's layout would differ")
  endif()
endif()

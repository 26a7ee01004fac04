# The tests that run Python need more than torch in the venv; a GPU node's venv often has only
# torch. At the end of the configure (deferred: the tests are defined further down), each such
# test whose modules the venv lacks is disabled, with a message naming what is missing
# (ctest lists it as "Not Run (Disabled)"). C++ tests that need the venv too, not checked here:
# Sweep.RunsResumesAfterAKillAndWritesEverything draws figures (matplotlib, numpy);
# Cli.TorchrunNoPython and Sweep.RunsThroughALaunchPrefix start <venv>/bin/torchrun.
set(HETPAR_PYTHON_TESTS
  "hf_llava_interop:pytest,transformers,safetensors,numpy"
  "plot_results:pytest,matplotlib,numpy"
  "peer_bench_smoke:transformers,safetensors"
  "gpu_check_script:pytest")

function(hetpar_check_python_tests)
  set(_modules "")
  foreach(_entry IN LISTS HETPAR_PYTHON_TESTS)
    string(REPLACE ":" ";" _entry "${_entry}")
    list(GET _entry 1 _mods)
    string(REPLACE "," ";" _mods "${_mods}")
    list(APPEND _modules ${_mods})
  endforeach()
  list(REMOVE_DUPLICATES _modules)
  set(_missing "${_modules}")
  if(HETPAR_PYTHON_PREFIX)
    list(JOIN _modules "','" _m)
    execute_process(COMMAND "${HETPAR_PYTHON_PREFIX}/bin/python" -c
      "import importlib.util as u; print(';'.join(m for m in ['${_m}'] if u.find_spec(m) is None))"
      OUTPUT_VARIABLE _missing OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(NOT _rc EQUAL 0)
      set(_missing "${_modules}")
    endif()
  endif()
  foreach(_entry IN LISTS HETPAR_PYTHON_TESTS)
    string(REPLACE ":" ";" _entry "${_entry}")
    list(GET _entry 0 _test)
    list(GET _entry 1 _mods)
    string(REPLACE "," ";" _mods "${_mods}")
    set(_lacks "")
    foreach(_mod IN LISTS _mods)
      if(_mod IN_LIST _missing)
        list(APPEND _lacks ${_mod})
      endif()
    endforeach()
    if(_lacks AND TEST ${_test})
      list(JOIN _lacks ", " _lacks)
      set_tests_properties(${_test} PROPERTIES DISABLED TRUE)
      if(HETPAR_PYTHON_PREFIX)
        message(STATUS "hetpar: test ${_test} disabled: ${HETPAR_PYTHON_PREFIX}/bin/python lacks ${_lacks}")
      else()
        message(STATUS "hetpar: test ${_test} disabled: no python goes with this LibTorch")
      endif()
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL hetpar_check_python_tests)

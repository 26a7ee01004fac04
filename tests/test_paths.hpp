// Where the tests find the source tree and the programs this build made. The
// absolute paths are compiled into one small unit alone (tests/test_paths.cpp):
// a fresh clone, whose paths differ, recompiles only it, and every other test
// unit comes from the compiler cache (CMakeLists.txt, "ccache").
#pragma once

#include <string>
#include <string_view>

namespace hetpar {

// The source tree's path with `relative` ("/workloads/tiny.toml") after it.
std::string source_tree_path(std::string_view relative = "");
// tests/data's, likewise.
std::string test_data_path(std::string_view relative = "");
// The hetpar binary this build made.
std::string hetpar_binary();
// torchrun in the venv this build took LibTorch from.
std::string torchrun_binary();

}  // namespace hetpar

// Paths this build was configured with. Compiled into one small unit alone
// (CMakeLists.txt): a fresh clone, whose paths differ, recompiles it and
// takes the units that ask for them from the compiler cache.
#pragma once

#include <string>

namespace hetpar {

// The python of the venv this build took LibTorch from (matplotlib for the plots).
std::string configured_python();
// The source tree this binary was built from.
std::string configured_source_tree();

}  // namespace hetpar

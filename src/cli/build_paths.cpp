#include "cli/build_paths.hpp"

namespace hetpar {

std::string configured_python() { return HETPAR_DEFAULT_PYTHON; }
std::string configured_source_tree() { return HETPAR_SOURCE_DIR; }

}  // namespace hetpar

#include "tests/test_paths.hpp"

namespace hetpar {

std::string source_tree_path(std::string_view relative) { return HETPAR_SOURCE_DIR + std::string(relative); }
std::string test_data_path(std::string_view relative) { return source_tree_path("/tests/data") + std::string(relative); }
std::string hetpar_binary() { return HETPAR_BINARY; }
std::string torchrun_binary() { return HETPAR_TORCHRUN; }

}  // namespace hetpar

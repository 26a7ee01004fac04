#include "util/build_info.hpp"

#include "build_commit.h"  // generated at build time: cmake/write_commit.cmake

namespace hetpar {

const char* build_commit() { return HETPAR_GIT_COMMIT; }
const char* build_version() { return HETPAR_VERSION; }
const char* build_torch_version() { return HETPAR_TORCH_VERSION; }

}  // namespace hetpar

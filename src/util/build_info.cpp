#include "util/build_info.hpp"

namespace hetpar {

const char* build_commit() { return HETPAR_GIT_COMMIT; }
const char* build_version() { return HETPAR_VERSION; }
const char* build_torch_version() { return HETPAR_TORCH_VERSION; }

}  // namespace hetpar

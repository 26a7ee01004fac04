// What this binary was built from. The commit lives in one translation unit
// so that a new commit recompiles one file, not the whole project.
#pragma once

namespace hetpar {

const char* build_commit();
const char* build_version();        // hetpar's own version
const char* build_torch_version();  // the LibTorch it was built against

}  // namespace hetpar

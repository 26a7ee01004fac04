// Names that become directory names (run.name, sweep.name): one path
// component that stays inside its parent, whatever the user typed.
#pragma once

#include <string>

namespace hetpar {

// "" when `name` is a plain name, else why not (for an error message):
// non-empty, at most 128 bytes, no '/' or '\\', no "..", not ".", no control
// characters, no leading '-' and no leading or trailing space.
std::string plain_name_problem(const std::string& name);

}  // namespace hetpar

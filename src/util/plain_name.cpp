#include "util/plain_name.hpp"

namespace hetpar {

std::string plain_name_problem(const std::string& name) {
  if (name.empty()) return "must not be empty";
  if (name.size() > 128) return "must be at most 128 characters, got " + std::to_string(name.size());
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos) {
    return "must be a plain name without path separators ('/' or '\\'), got \"" + name + "\"";
  }
  if (name == "." || name.find("..") != std::string::npos) {
    return "must be a plain name without \"..\" or \".\" (it names a directory under results/), got \"" + name + "\"";
  }
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "must not contain control characters";
  }
  if (name.front() == '-') return "must not start with '-', got \"" + name + "\"";
  if (name.front() == ' ' || name.back() == ' ') return "must not start or end with a space, got \"" + name + "\"";
  return "";
}

}  // namespace hetpar

#include "parallel/layout.hpp"

namespace hetpar {

std::string Layout::to_string() const {
  return "tp" + std::to_string(tp) + ".cp" + std::to_string(cp) + ".pp" + std::to_string(pp) +
         ".dp" + std::to_string(dp) + (sp ? ".sp" : "");
}

std::string to_string(Placement p) {
  switch (p) {
    case Placement::Colocated: return "colocated";
    case Placement::NonColocated: return "non-colocated";
    case Placement::Uniform: return "uniform";
  }
  return "?";
}

bool parse_placement(const std::string& text, Placement& out) {
  for (Placement p : {Placement::Colocated, Placement::NonColocated, Placement::Uniform}) {
    if (text == to_string(p)) {
      out = p;
      return true;
    }
  }
  return false;
}

}  // namespace hetpar

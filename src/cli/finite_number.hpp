// CLI11's number checks compare with < and >, which "nan" always passes: a
// NaN timeout never fires and a NaN tolerance never holds. Options that take
// a real number add this check.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace hetpar {

inline const CLI::Validator kFiniteNumber(
    [](std::string& text) {
      double value = 0;
      if (CLI::detail::lexical_cast(text, value) && std::isfinite(value)) return std::string();
      return "not a finite number: " + text;
    },
    "FINITE");

}  // namespace hetpar

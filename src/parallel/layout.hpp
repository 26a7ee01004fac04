// A module's parallel layout: how many ways each parallel dimension splits it.
#pragma once

#include <cstdint>
#include <string>

namespace hetpar {

struct Layout {
  int tp = 1;  // tensor parallel
  int cp = 1;  // context parallel
  int pp = 1;  // pipeline parallel
  int dp = 1;  // data parallel
  // Sequence parallelism: outside their sharded parts the TP ranks each hold
  // a 1/tp of the sequence (tp/sequence_split.hpp). Built for the LLM; set
  // only with tp > 1 (resolve_placement clears it otherwise).
  bool sp = false;

  int size() const { return tp * cp * pp * dp; }
  // How many parts the TP ranks split a CP rank's sequence into outside the
  // sharded matmuls (the residual stream, the norms, what stages send): tp
  // under sequence parallelism, else 1.
  int sequence_parts() const { return sp ? tp : 1; }
  bool operator==(const Layout&) const = default;
  // "tp2.cp1.pp1.dp4" (".sp" after it under sequence parallelism): compact
  // and unambiguous in logs and error messages.
  std::string to_string() const;
};

// How the two modules' rank ranges relate (see DESIGN.md, "What a run is").
enum class Placement { Colocated, NonColocated, Uniform };

std::string to_string(Placement p);
// Accepts "colocated", "non-colocated", "uniform"; returns false on anything else.
bool parse_placement(const std::string& text, Placement& out);

}  // namespace hetpar

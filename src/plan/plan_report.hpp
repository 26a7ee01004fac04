// What `hetpar plan` writes: the ranked table with each candidate's phase
// breakdown (text), the whole plan as JSON ("hetpar-plan/1", what the paper
// figure is drawn from), and a sweep file of the top candidates plus the
// best uniform baseline, so one `hetpar sweep` measures the prediction.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "plan/planner.hpp"

namespace hetpar {

// "enc tp1.cp1.pp1.dp4 / llm tp2.cp1.pp1.dp2" (with the split and run-ahead when non-colocated).
std::string layout_text(const LayoutConfig& layout);

std::string plan_table(const Plan& plan, const std::string& profile_origin);

// `labels` become top-level keys (the paper figure reads "llm" and "encoder").
nlohmann::json plan_json(const Plan& plan, const RunConfig& base, const std::string& profile_origin,
                         const std::map<std::string, std::string>& labels);

// A sweep over the top candidates, its baseline the best uniform one (or,
// where none fits, the run file's own layout made uniform). `base_file` is
// the run the sweep starts from, relative to the sweep file.
std::string plan_sweep_toml(const Plan& plan, const RunConfig& base, const std::string& base_file);

}  // namespace hetpar

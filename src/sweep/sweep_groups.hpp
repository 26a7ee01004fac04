// A sweep's settings: points that differ only in placement share one (the
// other axes' values), and the placements of a setting are what the report
// sets side by side.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace hetpar {

// "enc-128x2" (the non-placement axes' values, joined by " / "); "(all)" without any.
std::string setting_of(const nlohmann::json& record);

struct SettingPoints {
  std::map<std::string, const nlohmann::json*> best;  // placement -> the point with the most tokens/s
  const nlohmann::json* baseline = nullptr;           // the baseline of the setting's points
};

// From the rows of finished runs (points and baselines, repeats pooled), by setting.
std::map<std::string, SettingPoints> points_by_setting(const std::vector<const nlohmann::json*>& ok_rows);

}  // namespace hetpar

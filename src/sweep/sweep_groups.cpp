#include "sweep/sweep_groups.hpp"

namespace hetpar {

std::string setting_of(const nlohmann::json& record) {
  std::string key;
  if (!record.contains("axes")) return "(all)";
  for (const auto& [axis, value] : record["axes"].items()) {
    if (axis != "placement") key += (key.empty() ? "" : " / ") + value.get<std::string>();
  }
  return key.empty() ? "(all)" : key;
}

std::map<std::string, SettingPoints> points_by_setting(const std::vector<const nlohmann::json*>& ok_rows) {
  std::map<std::string, const nlohmann::json*> by_id;
  for (const nlohmann::json* r : ok_rows) by_id[r->value("run_id", "")] = r;
  const auto tokens = [](const nlohmann::json& r) {
    const auto it = r.find("tokens_per_second");
    return it != r.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  std::map<std::string, SettingPoints> settings;
  for (const nlohmann::json* r : ok_rows) {
    if (r->value("role", "") != "point") continue;
    SettingPoints& s = settings[setting_of(*r)];
    const nlohmann::json*& slot = s.best[r->value("placement", "?")];
    if (!slot || tokens(*r) > tokens(*slot)) slot = r;
    const auto b = by_id.find(r->value("baseline_id", ""));
    if (b != by_id.end()) s.baseline = b->second;
  }
  return settings;
}

}  // namespace hetpar

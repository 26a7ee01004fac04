#include "metrics/results_csv.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>

#include "util/durable_file.hpp"

namespace hetpar {
namespace {

using nlohmann::json;

// The scalar fields of a result record, in the order a reader expects them:
// identity first, then what ran, then the measurements, then provenance.
constexpr std::array<std::string_view, 44> kScalarColumns = {
    "run_id", "role", "baseline_id", "status", "error", "diverged_step", "label",
    "placement", "layout_encoder", "layout_llm", "encoder_name", "world_size",
    "flops_per_step", "step_seconds_median", "step_seconds_p10", "step_seconds_p90",
    "predicted_step_seconds", "prediction_error",
    "tflops_per_gpu", "mfu", "tokens_per_second", "image_tokens_per_second", "samples_per_second",
    "peak_memory_mib", "predicted_peak_memory_mib", "memory_prediction_error",
    "peak_tensor_mib", "predicted_tensor_mib", "tensor_prediction_error", "speedup_tflops", "speedup_tokens", "loss_max_rel_diff", "eval_loss_max_rel_diff",
    "loss_parity_ok",
    "run_dir", "commit", "hetpar_version", "torch_version", "device", "device_count",
    "backend", "ranks_per_core", "seed", "workload"};

// Shortest text that parses back to the same double, so no digits are lost or invented.
std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// One value as cell text; null and missing are empty, nested values stay JSON.
std::string cell_text(const json* v) {
  if (v == nullptr || v->is_null()) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_boolean()) return v->get<bool>() ? "true" : "false";
  if (v->is_number_unsigned()) return std::to_string(v->get<std::uint64_t>());
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
  if (v->is_number_float()) return number_text(v->get<double>());
  return v->dump();
}

// RFC 4180: quote a field holding a separator, quote or line break; double the quotes.
std::string quoted(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

const json* member(const json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// Keys of the object `r[field]` not yet in `seen`, appended in first-seen order.
void collect_keys(const json& r, const char* field, std::vector<std::string>& seen) {
  const json* obj = member(r, field);
  if (obj == nullptr || !obj->is_object()) return;
  for (const auto& [key, value] : obj->items()) {
    if (std::find(seen.begin(), seen.end(), key) == seen.end()) seen.push_back(key);
  }
}

std::vector<std::string> keys_of(const std::vector<json>& records, const char* field) {
  std::vector<std::string> keys;
  for (const json& r : records) collect_keys(r, field, keys);
  return keys;
}

}  // namespace

std::vector<json> read_results(const std::string& path_or_dir, bool* torn_tail, std::vector<int>* line_numbers) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string path =
      fs::is_directory(path_or_dir, ec) ? (fs::path(path_or_dir) / "results.jsonl").string() : path_or_dir;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open results file " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (torn_tail) *torn_tail = false;
  std::vector<json> records;
  size_t at = 0;
  for (int number = 1; at < text.size(); ++number) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    const bool last_unterminated = end == text.size();
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json record;
    try {
      record = json::parse(line);
    } catch (const json::parse_error& e) {
      // A write cut short by a crash leaves an unterminated last line: that
      // record never finished, so it is not there.
      if (last_unterminated && torn_tail) {
        *torn_tail = true;
        break;
      }
      throw std::runtime_error(path + ":" + std::to_string(number) + ": not valid JSON (" + e.what() + ")");
    }
    if (!record.is_object()) {
      throw std::runtime_error(path + ":" + std::to_string(number) + ": not a JSON object");
    }
    records.push_back(std::move(record));
    if (line_numbers) line_numbers->push_back(number);
  }
  return records;
}

std::vector<std::string> results_csv_header(const std::vector<json>& records) {
  std::vector<std::string> header(kScalarColumns.begin(), kScalarColumns.end());
  for (const std::string& axis : keys_of(records, "axes")) header.push_back("axis." + axis);
  for (const std::string& phase : keys_of(records, "phases")) header.push_back("phase." + phase);
  return header;
}

std::string results_csv_text(const std::vector<json>& records) {
  const std::vector<std::string> axes = keys_of(records, "axes");
  const std::vector<std::string> phases = keys_of(records, "phases");
  std::string out;
  const auto append_line = [&out](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) out += ',';
      out += quoted(cells[i]);
    }
    out += '\n';  // LF, not RFC 4180's CRLF: every spreadsheet reads it, and so do line tools
  };
  append_line(results_csv_header(records));
  for (const json& r : records) {
    std::vector<std::string> cells;
    for (std::string_view name : kScalarColumns) cells.push_back(cell_text(member(r, std::string(name))));
    const json* ax = member(r, "axes");
    for (const std::string& a : axes) cells.push_back(cell_text(ax ? member(*ax, a) : nullptr));
    const json* ph = member(r, "phases");
    for (const std::string& p : phases) cells.push_back(cell_text(ph ? member(*ph, p) : nullptr));
    append_line(cells);
  }
  return out;
}

void write_results_csv(const std::vector<json>& records, const std::string& path) {
  write_file_atomic(path, results_csv_text(records));
}

}  // namespace hetpar

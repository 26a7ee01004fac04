// A sweep's results.jsonl: reading it, and a CSV view of it for spreadsheets.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hetpar {

// Every record of results.jsonl, in file order. `path_or_dir` is the file or a
// directory holding it. Blank lines are skipped; a missing file, a line that is
// not JSON or not an object throws std::runtime_error naming the file (and line).
std::vector<nlohmann::json> read_results(const std::string& path_or_dir);

// The CSV columns: the fixed scalar fields, then `axis.<name>` and `phase.<name>`
// for every axis and phase seen in any record, in first-seen order (within one
// record, nlohmann::json's sorted key order).
std::vector<std::string> results_csv_header(const std::vector<nlohmann::json>& records);

// The whole CSV (header line, then one line per record, each ending in '\n').
std::string results_csv_text(const std::vector<nlohmann::json>& records);

// results_csv_text written to `path`; throws std::runtime_error when it cannot be written.
void write_results_csv(const std::vector<nlohmann::json>& records, const std::string& path);

}  // namespace hetpar

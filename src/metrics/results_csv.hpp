// A sweep's results.jsonl: reading it, and a CSV view of it for spreadsheets.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hetpar {

// Every record of results.jsonl, in file order. `path_or_dir` is the file or a
// directory holding it. Blank lines are skipped; a missing file, a line that is
// not JSON or not an object throws std::runtime_error naming the file (and line).
// With `torn_tail`, an unterminated last line that is not JSON (a write cut
// short by a crash) is skipped instead, and *torn_tail says so. With
// `line_numbers`, each record's line in the file (1-based), for messages.
std::vector<nlohmann::json> read_results(const std::string& path_or_dir, bool* torn_tail = nullptr,
                                         std::vector<int>* line_numbers = nullptr);

// The CSV columns: the fixed scalar fields, then `axis.<name>` and `phase.<name>`
// for every axis and phase seen in any record, in first-seen order (within one
// record, nlohmann::json's sorted key order).
std::vector<std::string> results_csv_header(const std::vector<nlohmann::json>& records);

// The whole CSV (header line, then one line per record, each ending in '\n').
std::string results_csv_text(const std::vector<nlohmann::json>& records);

// results_csv_text written atomically to `path`; throws FileError when it cannot be written.
void write_results_csv(const std::vector<nlohmann::json>& records, const std::string& path);

}  // namespace hetpar

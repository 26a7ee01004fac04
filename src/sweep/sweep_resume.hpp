// What a sweep keeps of an earlier attempt in its results.jsonl. Resuming is
// idempotent and crash-safe: the file is rewritten (atomically) with one
// record per run id — the last one written — so a re-run never duplicates a
// record, a torn last line from a crash is dropped, and the next append
// always starts on a fresh line.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "sweep/sweep_spec.hpp"

namespace hetpar {

struct ResumeState {
  std::map<std::string, nlohmann::json> done;  // run id -> its record: not run again
  size_t dropped_torn = 0;                     // 1 when a torn last line was dropped
  size_t dropped_retry = 0;                    // failed records dropped for --retry-failed
};

// Reads `path` (absent: nothing done) and rewrites it as described above.
// Invalid records are dropped (validity is re-evaluated on every run and
// recorded again); with `retry_failed`, so are records of runs that did not
// end "ok" and can run now. A run this machine cannot host (config dropped,
// hash kept) keeps its record. Throws std::runtime_error, naming the file
// (and line), when a record belongs to another sweep definition (its run id
// is unknown, its config hash differs, or the run is invalid by definition
// now) or is malformed (run_id, status or config_hash not a string, an
// unknown status).
ResumeState resume_results(const std::string& path, const std::vector<SweepRun>& runs, bool retry_failed);

}  // namespace hetpar

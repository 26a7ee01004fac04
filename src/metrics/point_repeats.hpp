// A sweep point measured several times (`hetpar sweep --repeat K` runs it as
// p001, p001r2, ..., p001rK, every run its own record with the point's
// label): its records gathered, and pooled into one set of figures.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace hetpar {

// The runs of one label, one record per run id (a later record of the same
// run id, as a resumed or retried sweep appends, supersedes the earlier).
struct PointRuns {
  std::string label;
  std::vector<const nlohmann::json*> runs;  // in first-seen order of their run ids
  bool ok() const;                          // every run ended "ok"
  std::vector<const nlohmann::json*> ok_runs() const;  // the runs that ended "ok", in order
  std::string status() const;               // "ok", or the first other status ("failed", ...)
};

struct PointIndex {
  std::vector<PointRuns> points;       // in first-seen order of their labels
  std::map<std::string, size_t> at;    // label -> index in points
  int unlabeled = 0;                   // records without a label: left out
  int superseded = 0;                  // records replaced by a later one of the same run
  const PointRuns* find(const std::string& label) const;
};

// Groups records by label. A record without a run id counts as the same
// run as any other record of its label without one.
PointIndex index_points(const std::vector<nlohmann::json>& records);

// One record for a point run more than once, from its "ok" runs: the first
// run's fields, each median figure (TFLOPS/GPU, tokens/s, step time, MFU,
// phases, ...) replaced by the median of the runs' medians, peak memory by
// the largest, loss parity by the worst, and `repeats` = the runs pooled.
nlohmann::json pooled_record(const PointRuns& point);

// The records with the repeats of each point pooled, in first-seen order:
// a point with one run keeps its record as it is; a point with more gets
// pooled_record of its ok runs, followed by its other runs' records as they
// are. A pooled point's speed-ups are its pooled figures over its pooled
// baseline's (the baseline of its first ok run, found by run id), and its
// baseline_id the run id of that baseline's row.
std::vector<nlohmann::json> pool_repeats(const std::vector<nlohmann::json>& records);

}  // namespace hetpar

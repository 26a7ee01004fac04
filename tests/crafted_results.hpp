// Crafted sweep results for the regression check's tests: results.jsonl
// records and each run's steps.jsonl, written without training anything.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace hetpar::crafted {

// `n` values spread evenly over center * (1 +- spread): a sample with a
// known median (`center`) and no random numbers.
inline std::vector<double> around(double center, double spread, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(center * (1.0 + spread * (2.0 * i / (n - 1) - 1.0)));
  return v;
}

// Two draws of 12 from one distribution (uniform 800..1200 tokens/s) whose
// medians happen to differ by 6.5%: on a noisy machine, a difference that
// means nothing.
inline const std::vector<double> kNoisyOld = {1182, 1179, 823, 834, 1134, 1094, 1068, 923, 1042, 1043, 1032, 863};
inline const std::vector<double> kNoisyNew = {972, 957, 1089, 1198, 1180, 1018, 978, 907, 814, 811, 986, 927};

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// TFLOPS/GPU of a step at `tokens` tokens/s: proportional, as in a real run
// whose steps all do the same work.
inline double tflops_at(double tokens) { return tokens * 1e-5; }

// One finished run: dir/runs/<id>/steps.jsonl with `warmup` slow steps and
// then one step per value of `tokens` (tokens/s), and its results record.
inline nlohmann::json write_run(const std::filesystem::path& dir, const std::string& id, const std::string& label,
                                const std::vector<double>& tokens, int warmup = 1) {
  const std::filesystem::path run_dir = dir / "runs" / id;
  std::filesystem::create_directories(run_dir);
  std::ofstream steps(run_dir / "steps.jsonl");
  int step = 0;
  auto write_step = [&](double t) {
    steps << nlohmann::json{{"step", ++step}, {"loss", 5.0}, {"step_seconds", 1000.0 / t},
                            {"tokens_per_second", t}, {"tflops_per_gpu", tflops_at(t)}}
                 .dump()
          << "\n";
  };
  // Warm-up steps are far slower: counting them would move every median.
  for (int i = 0; i < warmup; ++i) write_step(tokens.front() / 4);
  for (const double t : tokens) write_step(t);
  return {{"run_id", id},
          {"role", "point"},
          {"label", label},
          {"status", "ok"},
          {"run_dir", "runs/" + id},
          {"warmup_steps", warmup},
          {"timed_steps", tokens.size()},
          {"tokens_per_second", median_of(tokens)},
          {"tflops_per_gpu", tflops_at(median_of(tokens))}};
}

inline void write_records(const std::filesystem::path& dir, const std::vector<nlohmann::json>& records) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / "results.jsonl");
  for (const nlohmann::json& r : records) out << r.dump() << "\n";
}

}  // namespace hetpar::crafted

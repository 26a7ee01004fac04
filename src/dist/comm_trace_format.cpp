#include "dist/comm_trace_format.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace hetpar {

bool is_point_to_point(const TraceOp& op) { return op.kind == "send" || op.kind == "recv"; }

RankTrace read_rank_trace(std::istream& in, int rank) {
  RankTrace trace;
  trace.rank = rank;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const auto bad = [&](const std::string& why) {
      return std::runtime_error("rank " + std::to_string(rank) + " trace line " + std::to_string(line_no) + ": " + why);
    };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw bad(e.what());  // a rank killed mid-line leaves a torn last line
    }
    if (j.contains("wait")) {
      const int64_t i = j["wait"];
      if (i < 0 || i >= static_cast<int64_t>(trace.ops.size())) throw bad("wait on an unknown op");
      trace.waits.push_back(i);
      continue;
    }
    if (j.value("op", int64_t{-1}) != static_cast<int64_t>(trace.ops.size())) throw bad("ops out of order");
    TraceOp op;
    op.group = j.at("group");
    op.ranks = j.at("ranks").get<std::vector<int>>();
    op.kind = j.at("kind");
    op.peer = j.value("peer", -1);
    op.tag = j.value("tag", int64_t{0});
    op.count = j.value("count", int64_t{0});
    op.dtype = j.value("dtype", std::string());
    op.batch = j.value("batch", int64_t{0});
    op.waits_before = static_cast<int64_t>(trace.waits.size());
    trace.ops.push_back(std::move(op));
  }
  return trace;
}

std::vector<RankTrace> read_trace_dir(const std::string& dir) {
  std::vector<RankTrace> traces;
  const std::regex name(R"(rank(\d+)\.jsonl)");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    std::ifstream in(entry.path());
    traces.push_back(read_rank_trace(in, std::stoi(m[1])));
  }
  std::sort(traces.begin(), traces.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  return traces;
}

std::string op_line(int64_t index, const TraceOp& op) {
  nlohmann::json j = {{"op", index}, {"group", op.group}, {"ranks", op.ranks}, {"kind", op.kind}};
  if (op.peer >= 0) j["peer"] = op.peer;
  if (op.tag != 0) j["tag"] = op.tag;
  j["count"] = op.count;
  j["dtype"] = op.dtype;
  if (op.batch != 0) j["batch"] = op.batch;
  return j.dump();
}

std::string wait_line(int64_t index) { return nlohmann::json{{"wait", index}}.dump(); }

std::string describe(int rank, int64_t index, const TraceOp& op) {
  std::string s = "rank " + std::to_string(rank) + " op " + std::to_string(index) + ": " + op.kind;
  if (op.kind == "send") s += " to " + std::to_string(op.peer);
  if (op.kind == "recv") s += " from " + std::to_string(op.peer);
  if (is_point_to_point(op)) s += " tag " + std::to_string(op.tag);
  s += " (" + std::to_string(op.count) + " " + op.dtype + ")";
  if (op.batch != 0) s += " in batch " + std::to_string(op.batch);
  s += " on " + op.group + "[";
  for (size_t i = 0; i < op.ranks.size(); ++i) s += (i ? "," : "") + std::to_string(op.ranks[i]);
  return s + "]";
}

}  // namespace hetpar

// Every key a run file may hold, declared once: its type, default, allowed
// values, meaning and the RunConfig field it fills. Reading with type and range
// checks (here), unknown-key detection, to_toml and `hetpar train --help`
// (run_config.cpp) all walk this one table, so adding a key is one line.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "config/run_config.hpp"
#include "config/toml_document.hpp"

namespace hetpar {

using SchemaValue = std::variant<int64_t, double, bool, std::string>;

enum class ValueKind { Integer, Float, Boolean, String };

// The values a key allows beyond its type.
struct Constraint {
  std::string text;  // for --help, after the type: ">= 1", "in {auto, gloo, nccl}"; empty: any
  // "" when VALUE is allowed, else why not ("must be >= 1, got 0").
  std::function<std::string(const SchemaValue&)> violation;
};

struct SchemaKey {
  std::string key;  // dotted, e.g. "layout.llm.tp"
  ValueKind kind;
  int64_t max_integer;  // integers: the largest the field can hold
  Constraint allowed;
  std::string meaning;       // one line for --help
  std::string default_text;  // for --help: the default as TOML, or words
  std::function<SchemaValue(const RunConfig&)> get;
  std::function<void(RunConfig&, const SchemaValue&)> set;

  std::string section() const;  // "layout.llm"
  std::string name() const;     // "tp"
};

// In file order: keys of a section are adjacent, sections in --help order.
const std::vector<SchemaKey>& run_schema();

// Checks the type and range of each key present in DOC and stores it in CONFIG;
// absent keys keep CONFIG's value.
void read_schema_values(const TomlDocument& doc, RunConfig& config);

// "integer", "float", "boolean", "string".
std::string kind_name(ValueKind kind);

// VALUE in TOML syntax: 60.0, "gloo", true.
std::string toml_literal(const SchemaValue& value);

}  // namespace hetpar

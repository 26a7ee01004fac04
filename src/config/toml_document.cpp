#include "config/toml_document.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "config/config_error.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

std::string position(const toml::source_region& where) {
  return "line " + std::to_string(where.begin.line) + ", column " +
         std::to_string(where.begin.column);
}

toml::table parse_or_throw(std::string_view text, const std::string& origin) {
  try {
    return toml::parse(text, std::string_view(origin));
  } catch (const toml::parse_error& e) {
    throw ConfigError(origin, "(parse)",
                      position(e.source()) + ": " + std::string(e.description()));
  }
}

toml::table parse_file_or_throw(const std::string& file) {
  try {
    return toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    throw ConfigError(file, "(parse)", position(e.source()) + ": " + std::string(e.description()));
  }
}

// Deep merge, SRC wins. Nodes are moved, not copied: a copied node loses the
// file it came from.
void merge_into(toml::table& dst, toml::table&& src) {
  for (auto&& [key, node] : src) {
    toml::table* dst_table = dst.get_as<toml::table>(key);
    if (dst_table != nullptr && node.is_table()) {
      merge_into(*dst_table, std::move(*node.as_table()));
      continue;
    }
    node.visit([&, &key = key](auto& typed) { dst.insert_or_assign(key, std::move(typed)); });
  }
}

// Removes and returns the file's `include` list.
std::vector<std::string> take_includes(toml::table& own, const std::string& file) {
  const toml::node* node = own.get("include");
  if (node == nullptr) return {};
  const toml::array* list = node->as_array();
  if (list == nullptr || !std::all_of(list->begin(), list->end(),
                                      [](const toml::node& item) { return item.is_string(); })) {
    throw ConfigError(file, "include",
                      "expected an array of file names, e.g. include = [\"base.toml\"]");
  }
  std::vector<std::string> includes;
  for (const toml::node& item : *list) includes.push_back(item.as_string()->get());
  own.erase("include");
  return includes;
}

std::string chain_text(const std::vector<std::string>& chain, const std::string& last) {
  std::string text;
  for (const std::string& file : chain) text += file + " -> ";
  return text + last;
}

// CHAIN: the files being loaded, outermost first; meeting one again is a cycle.
toml::table load_with_includes(const std::string& file, std::vector<std::string>& chain) {
  toml::table own = parse_file_or_throw(file);
  toml::table merged;
  for (const std::string& include : take_includes(own, file)) {
    const std::string path = (fs::path(file).parent_path() / include).lexically_normal().string();
    if (!fs::is_regular_file(path)) {
      throw ConfigError(file, "include",
                        "cannot read \"" + include + "\" (looked for " + path + ")");
    }
    for (const std::string& open : chain) {
      if (fs::equivalent(open, path)) {
        throw ConfigError(file, "include", "include cycle: " + chain_text(chain, path));
      }
    }
    chain.push_back(path);
    merge_into(merged, load_with_includes(path, chain));
    chain.pop_back();
  }
  merge_into(merged, std::move(own));
  return merged;
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return std::string(text.substr(first, last - first + 1));
}

// Bare TOML key parts only: quoted parts would let a key smuggle in a '.'.
bool is_dotted_key(const std::string& key) {
  bool part_empty = true;
  for (char c : key) {
    if (c == '.') {
      if (part_empty) return false;
      part_empty = true;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') {
      part_empty = false;
    } else {
      return false;
    }
  }
  return !part_empty;
}

bool is_one_toml_value(const std::string& text) {
  try {
    return toml::parse("v = " + text).size() == 1;
  } catch (const toml::parse_error&) {
    return false;
  }
}

const char* type_word(toml::node_type type) {
  switch (type) {
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::string:
      return "string";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "value";
  }
}

}  // namespace

TomlDocument TomlDocument::load(const std::string& file) {
  if (!fs::is_regular_file(file)) {
    throw ConfigError(file, "(file)", "cannot read the run file (missing or not a regular file)");
  }
  std::vector<std::string> chain{file};
  return TomlDocument(file, load_with_includes(file, chain));
}

TomlDocument TomlDocument::from_text(const std::string& text, const std::string& origin) {
  return TomlDocument(origin, parse_or_throw(text, origin));
}

void TomlDocument::place_over(TomlDocument&& base) {
  merge_into(base.root_, std::move(root_));
  root_ = std::move(base.root_);
}

void TomlDocument::apply_override(const std::string& assignment) {
  const std::string origin(kOverrideOrigin);
  const auto equals = assignment.find('=');
  const std::string key = trim(std::string_view(assignment).substr(0, equals));
  if (equals == std::string::npos || !is_dotted_key(key)) {
    throw ConfigError(origin, key.empty() ? assignment : key,
                      "expected dotted.key=value (key parts: letters, digits, '_', '-'), got \"" +
                          assignment + "\"");
  }
  const std::string value = trim(std::string_view(assignment).substr(equals + 1));
  const std::string value_text = is_one_toml_value(value) ? value : toml_quoted(value);
  // Parsing "key = value" as a tiny document gives the nested tables and a
  // source of "--set" on every node, so it merges like an include.
  merge_into(root_, parse_or_throw(key + " = " + value_text, origin));
}

const toml::node* TomlDocument::find(std::string_view dotted_key) const {
  return root_.at_path(dotted_key).node();
}

std::string TomlDocument::origin(const toml::node* node) const {
  if (node == nullptr || !node->source().path) return file_;
  return *node->source().path;
}

std::string toml_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string describe_node(const toml::node& node) {
  if (node.is_table()) return "a table";
  if (node.is_array()) return "an array";
  if (const auto* text = node.as_string()) return "string " + toml_quoted(text->get());
  std::ostringstream out;
  node.visit([&](const auto& value) { out << value; });
  return std::string(type_word(node.type())) + " " + out.str();
}

}  // namespace hetpar

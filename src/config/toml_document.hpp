// A run file's TOML tree with its `include = [...]` files merged in and the
// `--set` overrides applied. Each value remembers the file it came from (its
// node's source path, "--set" for overrides), so an error names the file to fix.
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>

namespace hetpar {

// The "file" named by errors in values given on the command line.
inline constexpr std::string_view kOverrideOrigin = "--set";

// TEXT as a TOML basic string, "like \"this\"": double quotes read the same in
// error messages and in files.
std::string toml_quoted(const std::string& text);

// What a node holds, for errors: `string "two"`, `float 2.5`, `a table`.
std::string describe_node(const toml::node& node);

class TomlDocument {
 public:
  // Parses FILE and, recursively, the files it includes (paths relative to the
  // including file). Tables are deep-merged; the including file wins, and of two
  // includes the later one wins. Throws ConfigError.
  static TomlDocument load(const std::string& file);
  // TEXT as a document of its own, errors and origins naming ORIGIN.
  static TomlDocument from_text(const std::string& text, const std::string& origin);

  // BASE's keys under this document's: a key set here wins, one set only in
  // BASE is taken from it (remembering its origin).
  void place_over(TomlDocument&& base);

  // Applies "dotted.key=value". VALUE is TOML ("2", "true", "[1, 2]", "\"s\"");
  // anything that does not parse as one TOML value is taken as a string.
  // Throws ConfigError naming "--set".
  void apply_override(const std::string& assignment);

  const std::string& file() const { return file_; }
  const toml::table& root() const { return root_; }

  // The node at a dotted key ("layout.llm.tp"), or nullptr.
  const toml::node* find(std::string_view dotted_key) const;
  // The file NODE came from; the run file for nullptr or a node without a source.
  std::string origin(const toml::node* node) const;

  // Copying a toml++ node drops its source, so documents only move.
  TomlDocument(TomlDocument&&) = default;
  TomlDocument& operator=(TomlDocument&&) = default;
  TomlDocument(const TomlDocument&) = delete;
  TomlDocument& operator=(const TomlDocument&) = delete;

 private:
  TomlDocument(std::string file, toml::table root)
      : file_(std::move(file)), root_(std::move(root)) {}

  std::string file_;
  toml::table root_;
};

}  // namespace hetpar

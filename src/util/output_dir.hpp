// Directories a user names for results (--out, --save-hf). hetpar replaces
// only files it wrote itself: a directory it writes into carries a marker
// file, and one without it must hold none of the names hetpar would write.
//
//   absent, or none of the kind's names in it  -> usable (marked on use)
//   marked for this kind                        -> usable: the earlier output is hetpar's
//   else                                        -> refused, naming the first such entry
#pragma once

#include <string>
#include <vector>

namespace hetpar {

struct OutputKind {
  std::string marker;              // the file that says hetpar made this output here
  std::vector<std::string> names;  // entries it writes; a trailing '*' matches any suffix
  std::string writer;              // which command writes it, for messages
};

// hetpar train --out: a run directory.
const OutputKind& run_outputs();
// hetpar train --save-hf: a transformers model directory.
const OutputKind& hf_export_outputs();
// hetpar plan --out: a plan and the sweep that measures it.
const OutputKind& plan_outputs();

bool is_marked(const std::string& dir, const OutputKind& kind);

// The entries of `dir` whose names `kind` writes (paths, sorted).
std::vector<std::string> existing_outputs(const std::string& dir, const OutputKind& kind);

// "" when hetpar may write `kind` into `dir`, else why not (for an error
// message that ends in what to do instead).
std::string output_dir_problem(const std::string& dir, const OutputKind& kind);

// The "format" a hetpar JSON file at `path` declares ("hetpar-plan/1", ...),
// or "" when it is no readable JSON object with one (an earlier output of
// hetpar's is recognised by it).
std::string json_format(const std::string& path);

// Creates `dir` if needed, checks it takes a file and writes the marker;
// throws FileError. Call only where output_dir_problem said "".
void mark_output_dir(const std::string& dir, const OutputKind& kind);

}  // namespace hetpar

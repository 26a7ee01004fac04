// Run-config loading: includes, --set overrides, every validation rule, the
// --help text and the to_toml round trip.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "config/run_config.hpp"
#include "config/run_schema.hpp"
#include "config/toml_document.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

const std::string kData = test_data_path();

// A fresh directory for files a test writes; removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "hetpar_config_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path file = path_ / name;
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  fs::path path_;
};

// The file an error names, without the scratch directory.
std::string file_name(const ConfigError& e) {
  return e.file() == kOverrideOrigin ? e.file() : fs::path(e.file()).filename().string();
}

TEST(RunConfig, IncludesMergeAndOverridesWin) {
  const RunConfig c = load_run_config(kData + "/good_run.toml",
                                      {"run.seed=99", "llm.heads=32", "runtime.backend=nccl"});
  EXPECT_EQ(c.run.name, "good_run");  // the file's stem
  EXPECT_EQ(c.run.seed, 99);          // --set over defaults.toml
  EXPECT_EQ(c.run.steps, 20);         // good_run.toml over defaults.toml
  EXPECT_EQ(c.encoder.hidden, 128);   // model.toml over defaults.toml
  EXPECT_EQ(c.encoder.heads, 4);
  EXPECT_EQ(c.encoder.layers, EncoderConfig{}.layers);  // written nowhere
  EXPECT_EQ(c.llm.hidden, 256);
  EXPECT_EQ(c.llm.heads, 32);  // --set over good_run.toml over model.toml
  EXPECT_EQ(c.llm.kv_heads, 4);
  EXPECT_EQ(c.runtime.backend, "nccl");         // bare word taken as a string
  EXPECT_DOUBLE_EQ(c.runtime.timeout_s, 30.0);  // integer accepted as a float
  EXPECT_EQ(c.placement.placement, Placement::NonColocated);
  EXPECT_EQ(c.placement.encoder_ranks, (RankRange{0, 2}));
  EXPECT_EQ(c.placement.llm_ranks, (RankRange{2, 4}));
  EXPECT_EQ(c.placement.world_size, 6);
}

TEST(TomlDocument, RemembersWhichFileEachValueCameFrom) {
  TomlDocument doc = TomlDocument::load(kData + "/good_run.toml");
  auto origin = [&](const char* key) {
    return fs::path(doc.origin(doc.find(key))).filename().string();
  };
  EXPECT_EQ(origin("run.steps"), "good_run.toml");
  EXPECT_EQ(origin("encoder.hidden"), "model.toml");
  EXPECT_EQ(origin("run.seed"), "defaults.toml");
  EXPECT_EQ(doc.find("include"), nullptr);  // consumed, not a key of the run
  doc.apply_override("run.seed = 5");
  EXPECT_EQ(doc.origin(doc.find("run.seed")), kOverrideOrigin);
  EXPECT_EQ(origin("run.steps"), "good_run.toml");  // neighbours keep theirs
}

TEST(RunConfig, OverrideValuesAreTomlOrElseStrings) {
  ScratchDir dir;
  const std::string file = dir.write("run.toml", "");
  const RunConfig c =
      load_run_config(file, {"run.name=two words", "encoder.frozen=true", "runtime.timeout_s=2.5",
                             "run.steps=7", "layout.placement = \"non-colocated\""});
  EXPECT_EQ(c.run.name, "two words");
  EXPECT_TRUE(c.encoder.frozen);
  EXPECT_DOUBLE_EQ(c.runtime.timeout_s, 2.5);
  EXPECT_EQ(c.run.steps, 7);
  EXPECT_EQ(c.layout.placement, Placement::NonColocated);
}

TEST(RunConfig, LaterIncludeWinsOverEarlierAndSharedIncludesAreNoCycle) {
  ScratchDir dir;
  dir.write("shared.toml", "[run]\nseed = 5\n");
  dir.write("a.toml", "include = [\"shared.toml\"]\n[run]\nsteps = 3\n[llm]\nlayers = 6\n");
  dir.write("b.toml", "include = [\"shared.toml\"]\n[run]\nsteps = 4\n");
  const RunConfig c =
      load_run_config(dir.write("run.toml", "include = [\"a.toml\", \"b.toml\"]\n"), {});
  EXPECT_EQ(c.run.steps, 4);
  EXPECT_EQ(c.llm.layers, 6);  // tables merge key by key
  EXPECT_EQ(c.run.seed, 5);
}

// One bad input per row: the first problem found must be this one.
struct BadInput {
  const char* name = "";
  std::string run = "";    // text of run.toml
  std::string extra = "";  // text of extra.toml, written when not empty
  std::vector<std::string> overrides = {};
  std::string key = "";
  std::string reason = "";        // a part of the expected reason
  std::string file = "run.toml";  // the file the error must name
};

const std::string kNonColocated = "[layout]\nplacement = \"non-colocated\"\n";
const std::string kIncludeExtra = "include = [\"extra.toml\"]\n";

// One row per line reads as a table.
// clang-format off
const std::vector<BadInput> kBadInputs = {
    {.name = "unknown_key_in_section", .run = "[encoder]\nhiden = 64\n", .key = "encoder.hiden", .reason = "unknown key (did you mean \"encoder.hidden\"?)"},
    {.name = "unknown_section", .run = "[trainer]\nlr = 1\n", .key = "trainer", .reason = "unknown key"},
    {.name = "unknown_top_level_key", .run = "steps = 3\n", .key = "steps", .reason = "unknown key (did you mean \"run.steps\"?)"},
    {.name = "key_in_wrong_section", .run = "[llm]\nmlp_hidden = 64\n", .key = "llm.mlp_hidden", .reason = "did you mean \"encoder.mlp_hidden\""},
    {.name = "quoted_key_with_dot", .run = "\"run.steps\" = 3\n", .key = "\"run.steps\"", .reason = "did you mean \"run.steps\""},
    {.name = "section_given_a_value", .run = "encoder = 3\n", .key = "encoder", .reason = "expected a table, got integer 3"},
    {.name = "integer_given_string", .run = "[run]\nsteps = \"two\"\n", .key = "run.steps", .reason = "expected an integer, got string \"two\""},
    {.name = "integer_given_float", .run = "[encoder]\nlayers = 2.5\n", .key = "encoder.layers", .reason = "expected an integer, got float 2.5"},
    {.name = "integer_given_boolean", .run = "[llm]\nheads = true\n", .key = "llm.heads", .reason = "expected an integer, got boolean true"},
    {.name = "integer_given_array", .run = "[run]\nseed = [1, 2]\n", .key = "run.seed", .reason = "expected an integer, got an array"},
    {.name = "boolean_given_integer", .run = "[encoder]\nfrozen = 1\n", .key = "encoder.frozen", .reason = "expected a boolean, got integer 1"},
    {.name = "string_given_integer", .run = "[runtime]\nbackend = 1\n", .key = "runtime.backend", .reason = "expected a string, got integer 1"},
    {.name = "float_given_string", .run = "[runtime]\ntimeout_s = \"60\"\n", .key = "runtime.timeout_s", .reason = "expected a float, got string \"60\""},
    {.name = "parse_error", .run = "[run\nsteps = 1\n", .key = "(parse)", .reason = "line 1, column 5"},
    {.name = "parse_error_in_include", .run = kIncludeExtra, .extra = "[run]\nsteps = = 1\n", .key = "(parse)", .reason = "line 2", .file = "extra.toml"},
    {.name = "missing_include", .run = "include = [\"nope.toml\"]\n", .key = "include", .reason = "cannot read \"nope.toml\""},
    {.name = "missing_nested_include", .run = kIncludeExtra, .extra = "include = [\"gone.toml\"]\n", .key = "include", .reason = "\"gone.toml\"", .file = "extra.toml"},
    {.name = "include_of_itself", .run = "include = [\"run.toml\"]\n", .key = "include", .reason = "include cycle"},
    {.name = "include_cycle", .run = kIncludeExtra, .extra = "include = [\"run.toml\"]\n", .key = "include", .reason = "include cycle", .file = "extra.toml"},
    {.name = "include_not_an_array", .run = "include = \"extra.toml\"\n", .key = "include", .reason = "expected an array of file names"},
    {.name = "bad_value_in_include", .run = kIncludeExtra, .extra = "[run]\nsteps = 0\n", .key = "run.steps", .reason = "must be >= 1, got 0", .file = "extra.toml"},
    {.name = "steps_zero", .run = "[run]\nsteps = 0\n", .key = "run.steps", .reason = "must be >= 1, got 0"},
    {.name = "seed_negative", .run = "[run]\nseed = -1\n", .key = "run.seed", .reason = "must be >= 0, got -1"},
    {.name = "empty_name", .run = "[run]\nname = \"\"\n", .key = "run.name", .reason = "must not be empty"},
    {.name = "name_escaping_results", .run = "[run]\nname = \"../../etc\"\n", .key = "run.name", .reason = "without path separators"},
    {.name = "name_dot_dot", .run = "[run]\nname = \"..\"\n", .key = "run.name", .reason = "without \"..\""},
    {.name = "name_like_an_option", .run = "[run]\nname = \"-rf\"\n", .key = "run.name", .reason = "must not start with '-'"},
    {.name = "vocab_without_text_tokens", .run = "[llm]\nvocab_size = 3\n", .key = "llm.vocab_size", .reason = "must be >= 4, got 3"},
    {.name = "odd_llm_head_size", .run = "[llm]\nhidden = 12\nheads = 4\nkv_heads = 4\n", .key = "llm.hidden", .reason = "= 3 is the head size, which RoPE needs even"},
    {.name = "recompute_layers_negative", .run = "[run]\nrecompute = \"full\"\nrecompute_layers = -1\n", .key = "run.recompute_layers", .reason = "must be >= 0, got -1"},
    {.name = "eval_every_beyond_the_run", .run = "[run]\nsteps = 4\neval_every = 5\n", .key = "run.eval_every", .reason = "must be <= run.steps = 4 (no step would be evaluated), got 5"},
    {.name = "eval_batches_zero", .run = "[run]\neval_batches = 0\n", .key = "run.eval_batches", .reason = "must be >= 1, got 0"},
    {.name = "eval_files_without_eval_every", .run = "[data]\neval_files = \"held_out\"\n", .key = "data.eval_files", .reason = "is read only with run.eval_every > 0, which is 0"},
    {.name = "training_files_without_held_out_files", .run = "[run]\nsteps = 4\neval_every = 2\n[data]\nfiles = \"train\"\n", .key = "data.eval_files", .reason = "must name held-out batch files when run.eval_every > 0"},
    {.name = "recompute_modules_without_recompute", .run = "[run]\nrecompute_modules = \"llm\"\n", .key = "run.recompute_modules", .reason = "needs run.recompute = \"full\", got \"none\""},
    {.name = "bf16_residual_in_fp32", .run = "[run]\nprecision = \"fp32\"\nfp32_residual = false\n", .key = "run.fp32_residual", .reason = "needs run.precision = \"bf16\""},
    {.name = "fp32_residual_not_a_bool", .run = "[run]\nfp32_residual = \"no\"\n", .key = "run.fp32_residual", .reason = "bool"},
    {.name = "recompute_modules_unknown", .run = "[run]\nrecompute = \"full\"\nrecompute_modules = \"vision\"\n", .key = "run.recompute_modules", .reason = "must be one of both, llm, encoder"},
    {.name = "recompute_layers_without_recompute", .run = "[run]\nrecompute_layers = 2\n", .key = "run.recompute_layers", .reason = "needs run.recompute = \"full\", got \"none\""},
    {.name = "images_min_negative", .run = "[data]\nimages_min = -1\n", .key = "data.images_min", .reason = "must be >= 0, got -1"},
    {.name = "images_max_below_min", .run = "[data]\nimages_min = 3\nimages_max = 2\n", .key = "data.images_max", .reason = "must be >= data.images_min = 3, got 2"},
    // A product that would overflow int64 (it wrapped negative and passed).
    {.name = "images_max_overflowing", .run = "[data]\nimages_max = 4611686018427387904\n", .key = "llm.seq_len", .reason = "must be >= data.images_max * tokens per image + 2 = 73786976294838206466, got"},
    {.name = "images_max_wrapping_negative", .run = "[data]\nimages_max = 576460752303423488\n", .key = "llm.seq_len", .reason = "must be >= data.images_max * tokens per image + 2"},
    {.name = "timeout_zero", .run = "[runtime]\ntimeout_s = 0\n", .key = "runtime.timeout_s", .reason = "must be a finite number > 0, got 0.0"},
    {.name = "timeout_infinite", .run = "[runtime]\ntimeout_s = inf\n", .key = "runtime.timeout_s", .reason = "got inf"},
    {.name = "device_unknown", .run = "[runtime]\ndevice = \"gpu\"\n", .key = "runtime.device", .reason = "must be one of auto, cpu, cuda, got \"gpu\""},
    {.name = "backend_unknown", .run = "[runtime]\nbackend = \"mpi\"\n", .key = "runtime.backend", .reason = "must be one of auto, gloo, nccl, got \"mpi\""},
    {.name = "placement_unknown", .run = "[layout]\nplacement = \"split\"\n", .key = "layout.placement", .reason = "must be one of colocated, non-colocated, uniform, got \"split\""},
    {.name = "layout_dimension_zero", .run = "[layout.llm]\ntp = 0\n", .key = "layout.llm.tp", .reason = "must be >= 1, got 0"},
    {.name = "layout_dimension_too_large", .run = "[layout.llm]\ndp = 3000000000\n", .key = "layout.llm.dp", .reason = "must be <= 2147483647"},
    {.name = "image_not_multiple_of_patch", .run = "[encoder]\nimage_size = 30\n", .key = "encoder.image_size", .reason = "multiple of encoder.patch_size = 8, got 30"},
    {.name = "encoder_hidden_not_multiple_of_heads", .run = "[encoder]\nhidden = 66\n", .key = "encoder.hidden", .reason = "multiple of encoder.heads = 4, got 66"},
    {.name = "llm_hidden_not_multiple_of_heads", .run = "[llm]\nhidden = 66\n", .key = "llm.hidden", .reason = "multiple of llm.heads = 4, got 66"},
    {.name = "heads_not_multiple_of_kv_heads", .run = "[llm]\nkv_heads = 3\n", .key = "llm.heads", .reason = "multiple of llm.kv_heads = 3, got 4"},
    {.name = "encoder_heads_vs_encoder_tp", .run = kNonColocated + "[layout.encoder]\ntp = 3\n", .key = "encoder.heads", .reason = "multiple of layout.encoder.tp = 3, got 4"},
    {.name = "encoder_heads_vs_inherited_tp", .run = "[llm]\nheads = 8\nkv_heads = 8\n[layout.llm]\ntp = 8\n", .key = "encoder.heads", .reason = "layout.llm.tp = 8 (the encoder's tp under uniform placement), got 4"},
    {.name = "encoder_mlp_vs_encoder_tp", .run = "[encoder]\nmlp_hidden = 250\n" + kNonColocated + "[layout.encoder]\ntp = 4\n", .key = "encoder.mlp_hidden", .reason = "multiple of layout.encoder.tp = 4, got 250"},
    {.name = "llm_heads_vs_tp", .run = kNonColocated + "[layout.llm]\ntp = 3\n", .key = "llm.heads", .reason = "multiple of layout.llm.tp = 3, got 4"},
    {.name = "kv_heads_vs_tp", .run = "[llm]\nkv_heads = 1\n" + kNonColocated + "[layout.llm]\ntp = 2\n", .key = "llm.kv_heads", .reason = "multiple of layout.llm.tp = 2, got 1"},
    {.name = "vocab_vs_tp", .run = "[llm]\nvocab_size = 511\n" + kNonColocated + "[layout.llm]\ntp = 2\n", .key = "llm.vocab_size", .reason = "multiple of layout.llm.tp = 2, got 511"},
    {.name = "ffn_vs_tp", .run = "[llm]\nffn_hidden = 191\n" + kNonColocated + "[layout.llm]\ntp = 2\n", .key = "llm.ffn_hidden", .reason = "multiple of layout.llm.tp = 2, got 191"},
    {.name = "seq_len_vs_cp", .run = "[llm]\nseq_len = 130\n[layout.llm]\ncp = 2\n", .key = "llm.seq_len", .reason = "multiple of 2 * layout.llm.cp = 4, got 130"},
    {.name = "seq_len_vs_sequence_parallel", .run = "[llm]\nseq_len = 129\n[layout.llm]\ntp = 2\nsp = true\n", .key = "llm.seq_len", .reason = "multiple of layout.llm.cp * layout.llm.tp = 1 * 2 = 2 (layout.llm.sp), got 129"},
    {.name = "encoder_sequence_parallel", .overrides = {"layout.encoder.sp=true"}, .key = "layout.encoder.sp", .reason = "unknown key", .file = "--set"},
    {.name = "fewer_layers_than_stages", .run = "[layout.llm]\npp = 4\n", .key = "llm.layers", .reason = "must be >= layout.llm.pp = 4 (a layer per stage), got 2"},
    {.name = "fewer_micro_batches_than_stages", .run = "[llm]\nlayers = 8\n[layout.llm]\npp = 8\n", .key = "data.global_batch_size", .reason = "gives 4 micro-batches a step per llm dp rank, fewer than the 8 pipeline stages"},
    {.name = "run_ahead_short_of_the_pipeline", .run = "[layout]\nplacement = \"non-colocated\"\nrun_ahead = 1\n[layout.llm]\npp = 2\n", .key = "layout.run_ahead", .reason = "must be >= layout.llm.pp = 2"},
    {.name = "fewer_encoder_layers_than_stages", .run = kNonColocated + "[layout.encoder]\npp = 4\n", .key = "encoder.layers", .reason = "must be >= layout.encoder.pp = 4 (a layer per stage), got 2"},
    {.name = "colocated_encoder_tp_across_stages", .run = "[layout]\nplacement = \"colocated\"\n[layout.encoder]\ntp = 2\n[layout.llm]\npp = 2\n", .key = "layout.encoder.tp", .reason = "must divide the 1 ranks of each llm pipeline stage"},
    {.name = "encoder_in_flight_short_of_the_pipeline", .run = "[layout]\nplacement = \"colocated\"\nencoder_in_flight = 1\n[layout.encoder]\ndp = 2\n[layout.llm]\npp = 2\n", .key = "layout.encoder_in_flight", .reason = "must be 0 (llm pp + 1) or >= layout.llm.pp = 2"},
    {.name = "batch_vs_micro_batch_and_dp", .run = "[layout.llm]\ndp = 3\n", .key = "data.global_batch_size", .reason = "data.micro_batch_size * layout.llm.dp = 2 * 3 = 6, got 8"},
    {.name = "colocated_sizes_differ", .run = "[layout]\nplacement = \"colocated\"\n[layout.encoder]\ntp = 2\n", .key = "layout", .reason = "colocated placement needs both modules on the same ranks, but encoder tp2.cp1.pp1.dp1"},
    {.name = "uniform_with_other_encoder_layout", .run = "[layout.encoder]\ndp = 2\n", .key = "layout", .reason = "uniform placement makes the encoder inherit the llm layout"},
    {.name = "set_without_equals", .overrides = {"run.steps"}, .key = "run.steps", .reason = "expected dotted.key=value", .file = "--set"},
    {.name = "set_bad_key", .overrides = {"run..steps=1"}, .key = "run..steps", .reason = "expected dotted.key=value", .file = "--set"},
    {.name = "set_unknown_key", .run = "[run]\nsteps = 2\n", .overrides = {"run.stepz=3"}, .key = "run.stepz", .reason = "did you mean \"run.steps\"", .file = "--set"},
    {.name = "set_unknown_section", .overrides = {"model.layers=3"}, .key = "model", .reason = "unknown key", .file = "--set"},
    {.name = "set_out_of_range", .run = "[run]\nsteps = 2\n", .overrides = {"run.steps=0"}, .key = "run.steps", .reason = "must be >= 1, got 0", .file = "--set"},
    {.name = "set_bare_word_for_boolean", .overrides = {"encoder.frozen=yes"}, .key = "encoder.frozen", .reason = "expected a boolean, got string \"yes\"", .file = "--set"},
    {.name = "set_table_over_value", .overrides = {"run.steps.x=1"}, .key = "run.steps", .reason = "expected an integer, got a table", .file = "--set"},
    {.name = "set_dp_breaks_batch_size", .overrides = {"layout.llm.dp=3"}, .key = "data.global_batch_size", .reason = "layout.llm.dp = 2 * 3 = 6, got 8", .file = "--set"},
    {.name = "set_placement_mismatch", .overrides = {"layout.placement=colocated", "layout.encoder.tp=2"}, .key = "layout", .reason = "colocated placement", .file = "--set"},
    {.name = "set_breaks_consistency", .overrides = {"encoder.patch_size=5"}, .key = "encoder.image_size", .reason = "encoder.patch_size = 5, got 32", .file = "--set"},
};
// clang-format on

void PrintTo(const BadInput& row, std::ostream* out) { *out << row.name; }

class BadRunFile : public testing::TestWithParam<BadInput> {};

TEST_P(BadRunFile, NamesFileKeyAndReason) {
  const BadInput& row = GetParam();
  ScratchDir dir;
  const std::string file = dir.write("run.toml", row.run);
  if (!row.extra.empty()) dir.write("extra.toml", row.extra);
  try {
    load_run_config(file, row.overrides);
    FAIL() << "no error for " << row.name;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), row.key) << e.what();
    EXPECT_NE(e.reason().find(row.reason), std::string::npos) << e.what();
    EXPECT_EQ(file_name(e), row.file) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, BadRunFile, testing::ValuesIn(kBadInputs),
                         [](const testing::TestParamInfo<BadInput>& info) {
                           return info.param.name;
                         });

TEST(RunConfig, MissingRunFileIsAnError) {
  try {
    load_run_config(kData + "/no_such_run.toml", {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(file_name(e), "no_such_run.toml");
    EXPECT_EQ(e.key(), "(file)");
  }
}

TEST(RunConfig, IncludeCycleAcrossFilesNamesTheClosingFile) {
  try {
    load_run_config(kData + "/cycle_a.toml", {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(file_name(e), "cycle_b.toml");
    EXPECT_EQ(e.key(), "include");
    EXPECT_NE(e.reason().find("cycle_a.toml -> "), std::string::npos) << e.what();
  }
}

TEST(RunConfig, WorldSizeMustMatchThePlacement) {
  const RunConfig c = load_run_config(kData + "/good_run.toml", {});
  EXPECT_NO_THROW(check_world_size(c, 6));
  try {
    check_world_size(c, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), c.source_file);
    EXPECT_EQ(e.key(), "layout");
    EXPECT_NE(e.reason().find("needs 6 ranks"), std::string::npos) << e.what();
    EXPECT_NE(e.reason().find("but 4 were launched"), std::string::npos) << e.what();
  }
}

// TEXT with each line break and the indent after it turned into one space.
std::string unwrapped(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    out += ' ';
    while (i + 1 < text.size() && text[i + 1] == ' ') ++i;
  }
  return out;
}

TEST(RunConfig, HelpListsEveryKeyUnderItsSection) {
  const std::string help = describe_run_file();
  for (const SchemaKey& spec : run_schema()) {
    const size_t section = help.find("\n[" + spec.section() + "]\n");
    ASSERT_NE(section, std::string::npos) << spec.key;
    const size_t next_section = help.find("\n[", section + 1);
    const size_t line = help.find("\n  " + spec.name() + " = " + spec.default_text + " ", section);
    ASSERT_LT(line, next_section) << spec.key << " missing from its section in:\n" << help;
    EXPECT_NE(unwrapped(help.substr(line, next_section - line)).find(spec.meaning),
              std::string::npos)
        << spec.key;
  }
  EXPECT_NE(help.find("include = ["), std::string::npos);
  EXPECT_NE(help.find("--set dotted.key=value"), std::string::npos);
}

TEST(RunConfig, ToTomlRoundTripsEveryKey) {
  const RunConfig original = load_run_config(kData + "/all_keys.toml", {});
  for (const SchemaKey& spec : run_schema()) {  // else the round trip proves little
    EXPECT_NE(spec.get(original), spec.get(RunConfig{})) << spec.key << " not set in all_keys.toml";
  }
  ScratchDir dir;
  const RunConfig reloaded = load_run_config(dir.write("again.toml", to_toml(original)), {});
  for (const SchemaKey& spec : run_schema()) {
    EXPECT_EQ(spec.get(reloaded), spec.get(original)) << spec.key << " in:\n" << to_toml(original);
  }
  EXPECT_EQ(reloaded.placement.encoder_ranks, original.placement.encoder_ranks);
  EXPECT_EQ(reloaded.placement.llm_ranks, original.placement.llm_ranks);
  EXPECT_EQ(reloaded.placement.world_size, 40);
}

}  // namespace
}  // namespace hetpar

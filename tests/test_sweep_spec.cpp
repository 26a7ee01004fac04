// Sweep files: the grid's expansion (order, labels, overrides), baselines
// shared between points, invalid points kept with their reason, repeats in
// rounds, and clear errors for malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "sweep/sweep_spec.hpp"
#include "tests/test_paths.hpp"

namespace hetpar {
namespace {

const std::string kDir = test_data_path("/sweeps");

TEST(SweepSpec, ExpandsTheGridWithSharedBaselines) {
  const SweepSpec spec = load_sweep_spec(kDir + "/with_invalid.toml");
  EXPECT_EQ(spec.name, "with-invalid");
  ASSERT_EQ(spec.axes.size(), 2u);
  const std::vector<SweepRun> runs = expand_sweep(spec, {"run.steps=2"});
  std::vector<std::string> ids, labels;
  for (const SweepRun& r : runs) ids.push_back(r.id), labels.push_back(r.label);
  // Baseline b001 serves both points of enc-64x2, b002 those of enc-96x1; each
  // baseline comes before its first point; the last axis moves fastest.
  EXPECT_EQ(ids, (std::vector<std::string>{"b001", "p001", "p002", "b002", "p003", "p004"}));
  EXPECT_EQ(labels[1], "enc-64x2 / llm-tp2");
  EXPECT_EQ(labels[2], "enc-64x2 / llm-tp3");
  EXPECT_EQ(runs[1].baseline_id, "b001");
  EXPECT_EQ(runs[4].baseline_id, "b002");
  // The command line's overrides reach every run; the axis settings too.
  EXPECT_EQ(runs[1].config->run.steps, 2);
  EXPECT_EQ(runs[4].config->encoder.hidden, 96);
  EXPECT_EQ(runs[0].config->placement.placement, Placement::Uniform);
  EXPECT_EQ(runs[1].world_size, 2);
  EXPECT_FALSE(runs[1].config_hash.empty());
  EXPECT_NE(runs[1].config_hash, runs[4].config_hash);
}

TEST(SweepSpec, RepeatsRunInRoundsEachAgainstItsRoundsBaseline) {
  const std::vector<SweepRun> once = expand_sweep(load_sweep_spec(kDir + "/with_invalid.toml"), {});
  const std::vector<SweepRun> runs = repeat_runs(once, 3);
  std::vector<std::string> ids;
  for (const SweepRun& r : runs) ids.push_back(r.id);
  // Round 1 is the sweep as run once; later rounds repeat its valid runs
  // (p002 and p004 are invalid: listed once).
  EXPECT_EQ(ids, (std::vector<std::string>{"b001", "p001", "p002", "b002", "p003", "p004", "b001r2", "p001r2",
                                           "b002r2", "p003r2", "b001r3", "p001r3", "b002r3", "p003r3"}));
  const SweepRun& again = runs[11];
  ASSERT_EQ(again.id, "p001r3");
  EXPECT_EQ(again.repeat, 3);
  EXPECT_EQ(again.baseline_id, "b001r3");
  EXPECT_EQ(again.label, once[1].label);               // what results are pooled by
  EXPECT_EQ(again.config_hash, once[1].config_hash);   // the same configuration...
  EXPECT_EQ(again.config->run.name, "p001r3");         // ...under its own name
  EXPECT_EQ(runs[6].config->run.name, "b001r2");
  EXPECT_EQ(runs[1].repeat, 1);
  // Once is the sweep itself; fewer than once is refused.
  const std::vector<SweepRun> single = repeat_runs(once, 1);
  ASSERT_EQ(single.size(), once.size());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(single[i].id, once[i].id);
  EXPECT_THROW(repeat_runs(once, 0), std::invalid_argument);
}

TEST(SweepSpec, InvalidPointsKeepTheirReason) {
  const std::vector<SweepRun> runs = expand_sweep(load_sweep_spec(kDir + "/with_invalid.toml"), {});
  const SweepRun& tp3 = runs[2];
  ASSERT_EQ(tp3.label, "enc-64x2 / llm-tp3");
  EXPECT_FALSE(tp3.config.has_value());
  EXPECT_NE(tp3.invalid_reason.find("layout.llm.tp"), std::string::npos) << tp3.invalid_reason;
  EXPECT_TRUE(runs[1].config.has_value()) << runs[1].invalid_reason;
}

// Every file in sweeps/: a new one cannot ship with an invalid point.
TEST(SweepSpec, TheShippedSweepsAreValid) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(source_tree_path("/sweeps"))) {
    if (e.path().extension() == ".toml") names.push_back(e.path().filename().string());
  }
  ASSERT_GE(names.size(), 6u);
  for (const std::string& name : names) {
    const std::string file = source_tree_path("/sweeps/") + name;
    const std::vector<SweepRun> runs = expand_sweep(load_sweep_spec(file), {});
    ASSERT_FALSE(runs.empty()) << name;
    for (const SweepRun& r : runs) EXPECT_TRUE(r.config.has_value()) << name << " " << r.label << ": " << r.invalid_reason;
  }
}

// A malformed sweep file: the error names the file, the key and why.
struct BadSweep {
  const char* name;
  const char* text;
  const char* key;
  const char* reason;
};

void PrintTo(const BadSweep& b, std::ostream* os) { *os << b.name; }

class SweepSpecErrors : public ::testing::TestWithParam<BadSweep> {};

TEST_P(SweepSpecErrors, NameTheKey) {
  const std::string dir = ::testing::TempDir() + "/sweep_errors_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "/tiny_base.toml", dir + "/tiny_base.toml",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string file = dir + "/" + GetParam().name + ".toml";
  std::ofstream(file) << GetParam().text;
  try {
    load_sweep_spec(file);
    FAIL() << "accepted " << GetParam().name;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), file);
    EXPECT_EQ(e.key(), GetParam().key) << e.what();
    EXPECT_NE(e.reason().find(GetParam().reason), std::string::npos) << e.what();
  }
}

const char* kAxis = "\n[[axis]]\nname = \"a\"\n[[axis.value]]\nname = \"v\"\nset = { run = { steps = 2 } }\n";

INSTANTIATE_TEST_SUITE_P(
    Files, SweepSpecErrors,
    ::testing::Values(
        BadSweep{"no_sweep_table", "[[axis]]\nname = \"a\"\n", "sweep", "must be a table"},
        BadSweep{"no_name", "[sweep]\nbase = \"tiny_base.toml\"\n", "sweep.name", "non-empty string"},
        BadSweep{"name_escaping_results", "[sweep]\nname = \"../..\"\nbase = \"tiny_base.toml\"\n", "sweep.name",
                 "without path separators"},
        BadSweep{"name_dot_dot", "[sweep]\nname = \"..\"\nbase = \"tiny_base.toml\"\n", "sweep.name", "without \"..\""},
        BadSweep{"missing_base", "[sweep]\nname = \"x\"\nbase = \"nowhere.toml\"\n", "sweep.base", "no such run file"},
        BadSweep{"unknown_key", "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\nbasline = {}\n", "sweep.basline",
                 "unknown key"},
        BadSweep{"bad_rtol", "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\nloss_rtol = \"big\"\n", "sweep.loss_rtol",
                 "number >= 0"},
        BadSweep{"no_axis", "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n", "axis", "at least one"},
        BadSweep{"axis_without_values", "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n[[axis]]\nname = \"a\"\n",
                 "axis[0].value", "at least one"},
        BadSweep{"value_without_set",
                 "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n[[axis]]\nname = \"a\"\n[[axis.value]]\nname = \"v\"\n",
                 "a.value[0].set", "must be a table"},
        BadSweep{"repeated_value_name",
                 "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n[[axis]]\nname = \"a\"\n[[axis.value]]\n"
                 "name = \"v\"\nset = { run = { steps = 2 } }\n[[axis.value]]\nname = \"v\"\n"
                 "set = { run = { steps = 3 } }\n",
                 "a.value[1].name", "\"v\" is already a value of axis a"},
        BadSweep{"infinite_rtol", "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\nloss_rtol = inf\n",
                 "sweep.loss_rtol", "finite number >= 0"},
        BadSweep{"unknown_table", "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n[[axes]]\nname = \"a\"\n", "axes",
                 "unknown key (known: sweep, axis)"},
        // Typos in an axis or a value were ignored: the grid silently lost a setting.
        BadSweep{"unknown_axis_key",
                 "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n[[axis]]\nname = \"a\"\nvaleu = 3\n[[axis.value]]\n"
                 "name = \"v\"\nset = { run = { steps = 2 } }\n",
                 "axis[0].valeu", "unknown key (known: name, value)"},
        BadSweep{"unknown_value_key",
                 "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n[[axis]]\nname = \"a\"\n[[axis.value]]\n"
                 "name = \"v\"\nset = { run = { steps = 2 } }\nsets = { run = { seed = 3 } }\n",
                 "a.value[0].sets", "unknown key (known: name, set)"},
        // Two axes of one name: each record keeps one value a name, so one was lost.
        BadSweep{"repeated_axis_name",
                 "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n"
                 "[[axis]]\nname = \"a\"\n[[axis.value]]\nname = \"v\"\nset = { run = { steps = 2 } }\n"
                 "[[axis]]\nname = \"a\"\n[[axis.value]]\nname = \"w\"\nset = { run = { seed = 3 } }\n",
                 "axis[1].name", "\"a\" is already the name of axis[0]"},
        // Distinct value names that join into one label: results would pool them as repeats.
        BadSweep{"shared_label",
                 "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n"
                 "[[axis]]\nname = \"x\"\n[[axis.value]]\nname = \"p / q\"\nset = { run = { steps = 2 } }\n"
                 "[[axis.value]]\nname = \"p\"\nset = { run = { steps = 3 } }\n"
                 "[[axis]]\nname = \"y\"\n[[axis.value]]\nname = \"r\"\nset = { run = { seed = 1 } }\n"
                 "[[axis.value]]\nname = \"q / r\"\nset = { run = { seed = 2 } }\n",
                 "axis", "points p001 and p004 share the label \"p / q / r\""},
        BadSweep{"syntax", "[sweep\nname = 1\n", "(syntax)", ""}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SweepSpec, AcceptsAMinimalFile) {
  const std::string dir = ::testing::TempDir() + "/sweep_ok_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "/tiny_base.toml", dir + "/tiny_base.toml",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/ok.toml") << "[sweep]\nname = \"x\"\nbase = \"tiny_base.toml\"\n" << kAxis;
  const SweepSpec spec = load_sweep_spec(dir + "/ok.toml");
  ASSERT_EQ(spec.axes.size(), 1u);
  EXPECT_EQ(spec.axes[0].values[0].overrides, std::vector<std::string>{"run.steps=2"});
  EXPECT_DOUBLE_EQ(spec.loss_rtol, 1e-5);
}

}  // namespace
}  // namespace hetpar

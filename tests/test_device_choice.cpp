// runtime.device / run.precision / runtime.backend resolution against what a
// machine has, and the one-rank-per-GPU rule.
#include <gtest/gtest.h>

#include "config/config_error.hpp"
#include "config/device_choice.hpp"

namespace hetpar {
namespace {

RunConfig with(const std::string& device, const std::string& backend = "auto", const std::string& precision = "auto") {
  RunConfig c;
  c.source_file = "run.toml";
  c.runtime.device = device;
  c.runtime.backend = backend;
  c.run.precision = precision;
  return c;
}

// The error's key and a phrase of its reason.
void expect_refused(RunConfig c, int visible, const std::string& key, const std::string& phrase) {
  try {
    resolve_device(c, visible);
    ADD_FAILURE() << "accepted device " << c.runtime.device << " backend " << c.runtime.backend;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), key);
    EXPECT_NE(e.reason().find(phrase), std::string::npos) << e.reason();
  }
}

TEST(DeviceChoice, AutoFollowsTheMachine) {
  RunConfig cpu = with("auto");
  resolve_device(cpu, 0);
  EXPECT_EQ(cpu.runtime.device, "cpu");
  EXPECT_EQ(cpu.runtime.backend, "gloo");
  EXPECT_EQ(cpu.run.precision, "fp32");
  EXPECT_FALSE(computes_in_bf16(cpu));

  RunConfig gpu = with("auto");
  resolve_device(gpu, 8);
  EXPECT_EQ(gpu.runtime.device, "cuda");
  EXPECT_EQ(gpu.runtime.backend, "nccl");
  EXPECT_EQ(gpu.run.precision, "bf16");
  EXPECT_TRUE(computes_in_bf16(gpu));
}

TEST(DeviceChoice, ExplicitChoicesAreKept) {
  RunConfig c = with("cpu", "gloo", "bf16");  // CPU bf16 is real (its kernels exist)
  resolve_device(c, 4);
  EXPECT_EQ(c.runtime.device, "cpu");
  EXPECT_EQ(c.run.precision, "bf16");
  RunConfig g = with("cuda", "nccl", "fp32");
  resolve_device(g, 1);
  EXPECT_EQ(g.run.precision, "fp32");
}

TEST(DeviceChoice, RefusesWhatCannotRun) {
  expect_refused(with("cuda"), 0, "runtime.device", "none is visible");
  expect_refused(with("cpu", "nccl"), 2, "runtime.backend", "runtime.device is \"cpu\"");
  expect_refused(with("auto", "nccl"), 0, "runtime.backend", "runtime.device is \"cpu\"");
  expect_refused(with("cuda", "gloo"), 2, "runtime.backend", "point-to-point");
}

TEST(DeviceChoice, OneRankPerGpu) {
  EXPECT_EQ(cuda_device_index(0, 8, 8), 0);
  EXPECT_EQ(cuda_device_index(7, 8, 8), 7);
  EXPECT_EQ(cuda_device_index(1, 2, 8), 1);  // fewer ranks than GPUs: the first ones are used
  try {
    cuda_device_index(0, 4, 2);
    ADD_FAILURE() << "4 ranks on 2 GPUs accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.reason().find("this node runs 4 ranks but has 2 visible CUDA device(s)"), std::string::npos) << e.reason();
  }
  EXPECT_THROW(cuda_device_index(3, 1, 2), ConfigError);  // a local rank past the devices, whatever the count says
}

}  // namespace
}  // namespace hetpar

// The CPU's tensor-memory counter (metrics/cpu_tensor_memory.hpp): every CPU
// tensor's storage is counted while alive, to the byte, and the peak since a
// reset is the most alive at once.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include "metrics/cpu_tensor_memory.hpp"

namespace hetpar {
namespace {

constexpr size_t kMiB = 1 << 20;

TEST(CpuTensorMemory, CountsEveryStorageWhileAliveAndItsPeak) {
  ASSERT_TRUE(install_cpu_tensor_counter());
  ASSERT_TRUE(install_cpu_tensor_counter());  // a second install changes nothing
  const size_t before = cpu_tensor_bytes_in_use();
  reset_cpu_tensor_peak();
  EXPECT_EQ(cpu_tensor_peak_bytes(), before);
  {
    at::Tensor a = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    at::Tensor b = at::empty({1 << 20}, at::kBFloat16);  // 2 MiB
    EXPECT_EQ(cpu_tensor_bytes_in_use(), before + 6 * kMiB);
    a.reset();
    EXPECT_EQ(cpu_tensor_bytes_in_use(), before + 2 * kMiB);
    at::Tensor c = b.to(at::kFloat).neg();  // a 4 MiB temporary, then the 4 MiB result
    EXPECT_EQ(cpu_tensor_bytes_in_use(), before + 6 * kMiB);
    EXPECT_EQ(cpu_tensor_peak_bytes(), before + 10 * kMiB);
    at::Tensor view = c.narrow(0, 0, 16);  // a view takes no storage
    EXPECT_EQ(cpu_tensor_bytes_in_use(), before + 6 * kMiB);
  }
  EXPECT_EQ(cpu_tensor_bytes_in_use(), before);
  reset_cpu_tensor_peak();
  EXPECT_EQ(cpu_tensor_peak_bytes(), before);
  // Raw memory through the allocator, as some library paths take it, is counted and freed alike.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  void* raw = cpu->raw_allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(raw) % 64, 0u);  // the allocator's alignment kept
  EXPECT_EQ(cpu_tensor_bytes_in_use(), before + 1000);
  cpu->raw_deleter()(raw);
  EXPECT_EQ(cpu_tensor_bytes_in_use(), before);
  EXPECT_EQ(at::empty({0}).storage().nbytes(), 0u);  // an empty tensor allocates nothing
  EXPECT_EQ(cpu_tensor_bytes_in_use(), before);
}

}  // namespace
}  // namespace hetpar

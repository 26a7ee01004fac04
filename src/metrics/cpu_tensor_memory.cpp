#include "metrics/cpu_tensor_memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace hetpar {
namespace {

// Each block carries its size in a header as wide as the allocator's
// alignment, so the data stays aligned and a raw pointer can be freed
// (some LibTorch paths allocate raw memory through the CPU allocator).
constexpr std::size_t kHeader = 64;
static_assert(kHeader >= sizeof(std::size_t) && kHeader % alignof(std::max_align_t) == 0);

std::atomic<std::size_t> g_in_use{0};
std::atomic<std::size_t> g_peak{0};
c10::Allocator* g_inner = nullptr;  // LibTorch's own CPU allocator

void raise_peak(std::size_t now) {
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void free_counted(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  std::size_t bytes = 0;
  std::memcpy(&bytes, block, sizeof bytes);
  g_in_use.fetch_sub(bytes, std::memory_order_relaxed);
  g_inner->raw_deleter()(block);
}

struct CountingCpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(std::size_t bytes) override {
    if (bytes == 0) return {nullptr, nullptr, &free_counted, c10::Device(c10::DeviceType::CPU)};
    char* block = static_cast<char*>(g_inner->raw_allocate(bytes + kHeader));  // throws on failure, as before
    std::memcpy(block, &bytes, sizeof bytes);
    raise_peak(g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes);
    void* data = block + kHeader;
    return {data, data, &free_counted, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_counted; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

CountingCpuAllocator g_counter;

}  // namespace

bool install_cpu_tensor_counter() {
  if (g_inner != nullptr) return cpu_tensor_counter_installed();
  c10::Allocator* current = c10::GetCPUAllocator();
  // The counter frees through the inner allocator's raw deleter, so it must have one.
  if (current == nullptr || current->raw_deleter() == nullptr) return false;
  g_inner = current;
  c10::SetCPUAllocator(&g_counter, /*priority=*/1);
  return cpu_tensor_counter_installed();
}

bool cpu_tensor_counter_installed() { return c10::GetCPUAllocator() == &g_counter; }

std::size_t cpu_tensor_bytes_in_use() { return g_in_use.load(std::memory_order_relaxed); }
std::size_t cpu_tensor_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_cpu_tensor_peak() { g_peak.store(g_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace hetpar

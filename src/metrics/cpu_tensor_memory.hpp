// The CPU's counterpart of the CUDA caching allocator's statistics: bytes of
// tensor storage alive, and their peak since a reset. The process's RSS also
// holds the C library's freed-but-kept heap, the runtime's own memory and
// the threads' stacks, so it cannot say what the tensors of a step needed;
// this can, exactly, and it is what the memory model predicts (less the
// runtime's reserved part) on either device.
//
// It works by putting a counting allocator in front of LibTorch's CPU
// allocator for the life of the process: every CPU tensor's storage made
// after install_cpu_tensor_counter() is counted. Memory a library takes
// outside the tensor allocator (a GEMM's packing buffers, the communication
// library's staging) is not, as on a GPU.
#pragma once

#include <cstddef>

namespace hetpar {

// Puts the counter in front of the CPU allocator (idempotent; call before
// the first tensor whose storage should count). Returns false when another
// allocator of higher priority was already installed, so nothing is counted.
bool install_cpu_tensor_counter();
bool cpu_tensor_counter_installed();

// Bytes of CPU tensor storage alive now, and the most alive at once since
// the last reset (or the install).
std::size_t cpu_tensor_bytes_in_use();
std::size_t cpu_tensor_peak_bytes();
void reset_cpu_tensor_peak();

}  // namespace hetpar

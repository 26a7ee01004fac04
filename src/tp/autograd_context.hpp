// Non-tensor state (a process group, a route) carried through an autograd
// context as an address. The objects outlive every graph: they belong to the
// runtime or to an exchange that lives across the backward.
#pragma once

#include <torch/autograd.h>

#include <cstdint>
#include <string>

namespace hetpar {

template <typename T>
void save_pointer(torch::autograd::AutogradContext* ctx, const std::string& key, T* pointer) {
  ctx->saved_data[key] = static_cast<int64_t>(reinterpret_cast<intptr_t>(pointer));
}

template <typename T>
T* saved_pointer(torch::autograd::AutogradContext* ctx, const std::string& key) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(ctx->saved_data[key].toInt()));
}

}  // namespace hetpar

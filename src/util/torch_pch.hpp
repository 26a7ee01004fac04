// Precompiled header for every target that uses LibTorch: the heavy includes
// (20-40 s per translation unit otherwise) parsed once.
#pragma once

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <fmt/ranges.h>   // the wheel's own fmt, header-only: the single fmt hetpar uses

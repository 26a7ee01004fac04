#include "io/safetensors.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "util/durable_file.hpp"

namespace hetpar {
namespace {

const std::vector<std::pair<std::string, at::ScalarType>>& dtypes() {
  static const std::vector<std::pair<std::string, at::ScalarType>> table = {
      {"F32", at::kFloat}, {"BF16", at::kBFloat16}, {"F16", at::kHalf}, {"F64", at::kDouble},
      {"I64", at::kLong},  {"I32", at::kInt},       {"BOOL", at::kBool}, {"U8", at::kByte}};
  return table;
}

std::string dtype_name(at::ScalarType t) {
  for (const auto& [name, type] : dtypes()) {
    if (type == t) return name;
  }
  throw std::runtime_error(std::string("safetensors: unsupported dtype ") + c10::toString(t));
}

at::ScalarType dtype_of(const std::string& name, const std::string& path) {
  for (const auto& [n, type] : dtypes()) {
    if (n == name) return type;
  }
  throw std::runtime_error(path + ": unsupported safetensors dtype " + name);
}

// The bytes a tensor's shape takes. A negative dimension, or a count that
// overflows, would otherwise pass as a wrapped number of values.
uint64_t byte_size(const SafetensorsEntry& e, const std::string& path, const std::string& name) {
  const auto shape = [&] { return fmt::format("[{}]", fmt::join(e.shape, ", ")); };
  if (std::any_of(e.shape.begin(), e.shape.end(), [](int64_t d) { return d < 0; })) {
    throw std::runtime_error(fmt::format("{}: tensor {} has shape {}: a dimension is negative", path, name, shape()));
  }
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) return 0;
  uint64_t bytes = c10::elementSize(e.dtype);
  for (const int64_t d : e.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > uint64_t{INT64_MAX}) {
      throw std::runtime_error(fmt::format("{}: tensor {} has shape {}: more bytes than a file can hold", path, name,
                                           shape()));
    }
  }
  return bytes;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    header[name] = {{"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
    data.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data on 8 bytes
  // Into a temporary file, synced and renamed over the target once complete:
  // a full disk or a power loss leaves the old file (or none), never a
  // truncated one that a checkpoint's manifest names.
  const uint64_t length = text.size();  // little-endian on every platform hetpar builds for
  std::vector<std::string_view> pieces{{reinterpret_cast<const char*>(&length), sizeof length}, text};
  for (const at::Tensor& t : data) pieces.emplace_back(static_cast<const char*>(t.data_ptr()), t.nbytes());
  write_file_atomic(path, pieces);
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), sizeof length);
  if (!in || length > (uint64_t{1} << 30)) throw std::runtime_error(path + ": not a safetensors file (bad header length)");
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  if (!in) throw std::runtime_error(path + ": truncated header");
  in.seekg(0, std::ios::end);
  const auto file_bytes = static_cast<uint64_t>(in.tellg());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
    SafetensorsHeader out;
    out.data_start = sizeof length + length;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      SafetensorsEntry e{dtype_of(entry.at("dtype").get<std::string>(), path),
                         entry.at("shape").get<std::vector<int64_t>>()};
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      const uint64_t bytes = byte_size(e, path, name);
      if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] - offsets[0] != bytes) {
        throw std::runtime_error(fmt::format("{}: tensor {} has data_offsets {}, but its shape [{}] of {} takes {} bytes",
                                             path, name, entry.at("data_offsets").dump(), fmt::join(e.shape, ", "),
                                             c10::toString(e.dtype), bytes));
      }
      // Offsets past the end would only show when a rank reads the tensor.
      if (offsets[1] > file_bytes - out.data_start) {
        throw std::runtime_error(fmt::format("{}: tensor {} has data_offsets {}, past the end of the file's {} data "
                                             "bytes", path, name, entry.at("data_offsets").dump(),
                                             file_bytes - out.data_start));
      }
      e.begin = offsets[0];
      e.end = offsets[1];
      out.entries.emplace(name, std::move(e));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": bad safetensors header: " + e.what());
  }
}

const SafetensorsEntry& safetensors_entry(const SafetensorsHeader& header, const std::string& path,
                                          const std::string& name) {
  const auto it = header.entries.find(name);
  if (it == header.entries.end()) throw std::runtime_error(path + ": no tensor " + name);
  return it->second;
}

namespace {

std::ifstream open_data(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return in;
}

// Fills `t` with the bytes of tensor `name` from `offset` after the header.
void read_into(std::ifstream& in, const SafetensorsHeader& header, uint64_t offset, at::Tensor& t,
               const std::string& path, const std::string& name) {
  in.seekg(static_cast<std::streamoff>(header.data_start + offset));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!in) throw std::runtime_error(path + ": truncated data of tensor " + name);
}

}  // namespace

std::map<std::string, at::Tensor> read_safetensors(const std::string& path, const SafetensorsHeader& header,
                                                   const std::vector<std::string>& names) {
  std::ifstream in = open_data(path);
  std::map<std::string, at::Tensor> out;
  for (const std::string& name : names) {
    const SafetensorsEntry& e = safetensors_entry(header, path, name);
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    read_into(in, header, e.begin, t, path, name);
    out[name] = t;
  }
  return out;
}

at::Tensor read_safetensors_rows(const std::string& path, const SafetensorsHeader& header, const std::string& name,
                                 int64_t first, int64_t count) {
  const SafetensorsEntry& e = safetensors_entry(header, path, name);
  if (e.shape.empty() || first < 0 || count < 0 || first + count > e.shape[0]) {
    throw std::runtime_error(fmt::format("{}: rows [{}, {}) of tensor {} are outside its {} rows", path, first,
                                         first + count, name, e.shape.empty() ? 0 : e.shape[0]));
  }
  std::vector<int64_t> shape = e.shape;
  shape[0] = count;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(e.dtype));
  const auto row_bytes = static_cast<uint64_t>(count == 0 ? 0 : t.nbytes() / count);
  std::ifstream in = open_data(path);
  read_into(in, header, e.begin + static_cast<uint64_t>(first) * row_bytes, t, path, name);
  return t;
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  const SafetensorsHeader header = read_safetensors_header(path);
  std::vector<std::string> names;
  for (const auto& [name, entry] : header.entries) names.push_back(name);
  return read_safetensors(path, header, names);
}

}  // namespace hetpar

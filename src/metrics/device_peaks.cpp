#include "metrics/device_peaks.hpp"

#include <cctype>

namespace hetpar {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// `needle` occurs in `hay` starting a word, so "B200" does not match "GB200".
bool word_start_match(std::string_view hay, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    if (i > 0 && alnum(hay[i - 1])) continue;
    size_t k = 0;
    while (k < needle.size() && lower(hay[i + k]) == lower(needle[k])) ++k;
    if (k == needle.size()) return true;
  }
  return false;
}

}  // namespace

const std::vector<DevicePeak>& device_peaks() {
  // Vendor spec sheet, dense: the sheets list tensor-core figures with
  // sparsity; dense is half of those. PCIe/NVL cards run at lower clocks.
  static const std::vector<DevicePeak> table = {
      {"A100", "A100", 312.0, 156.0, 19.5},  // SXM and PCIe list the same peaks
      {"H100 PCIe", "H100 PCIe", 756.0, 378.0, 51.0},
      {"H100 NVL", "H100 NVL", 835.5, 417.5, 60.0},
      {"H100 SXM", "H100", 989.0, 494.5, 67.0},
      {"H200 NVL", "H200 NVL", 835.5, 417.5, 60.0},
      {"H200 SXM", "H200", 989.0, 494.5, 67.0},
      {"B200", "B200", 2250.0, 1125.0, 75.0},
  };
  return table;
}

std::optional<DevicePeak> find_device_peak(std::string_view device_name) {
  for (const DevicePeak& p : device_peaks()) {
    if (word_start_match(device_name, p.match)) return p;
  }
  return std::nullopt;
}

}  // namespace hetpar

// The one error type for bad configuration: names the file, the key and why.
#pragma once

#include <stdexcept>
#include <string>

#include "util/exit_codes.hpp"

namespace hetpar {

class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, std::string key, std::string reason)
      : std::runtime_error(file + ": " + key + ": " + reason),
        file_(std::move(file)), key_(std::move(key)), reason_(std::move(reason)) {}
  const std::string& file() const { return file_; }
  const std::string& key() const { return key_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_, key_, reason_;
};

}  // namespace hetpar

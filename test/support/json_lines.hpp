// Reading the JSON-lines files that weft-bench writes (--json), for tests that run it.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft::test {

/// Every non-empty line of `path`, parsed (an empty list when the file cannot be read).
inline std::vector<nlohmann::json> readJsonLines(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

}  // namespace weft::test

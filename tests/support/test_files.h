// Helpers several test files share: reading a file whole and loading a kernel that must load.
// (One definition here rather than one per file: the test binaries compile their files in
// batches, where two files' helpers of one name would clash.)
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ir/load.h"

namespace perfdojo::testing {

/// The bytes of `path`; a file that cannot be read fails the test case.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// `text` parsed and checked; a kernel that does not load fails the test case.
inline ir::Program must_load(const std::string& text) {
  auto r = ir::load_program(text);
  REQUIRE_MESSAGE(r.ok(), r.error_text() << "\n--- text ---\n" << text);
  return *r;
}

}  // namespace perfdojo::testing

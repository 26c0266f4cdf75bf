// A bounded, seeded fuzz of the parser and checker on mutated suite kernels.
//
// Every mutant must come back either valid or with located diagnostics; valid mutants must also
// satisfy the round-trip laws. The generator is a local splitmix64 with plain modulo so the
// sequence of mutants is the same on every platform and standard library.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;
using namespace perfdojo::ir;

constexpr int kIterations = 20000;
constexpr uint64_t kSeed = 0x5eedf00dULL;

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform-enough integer in [0, n); n > 0.
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t state_;
};

using perfdojo::testing::read_text;

/// Seeds: every suite kernel plus a hand-written program that uses the rarer constructs, so the
/// fuzz has material even while the suite is being written.
std::vector<std::string> corpus() {
  std::vector<std::string> out;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(PERFDOJO_KERNEL_DIR))
    if (e.path().extension() == ".pdj") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) out.push_back(read_text(p));
  out.push_back(
      "# every construct\n"
      "N = 8\n"
      "input a: f32[N, 4] in [-2, 0.5]\n"
      "input k: i32[N]\n"
      "output y: f32[N, 4] = -inf\n"
      "output w: i32[N]\n"
      "temp t: f64[1] = 1e-05\n"
      "\n"
      "N:par 4:vec y[{0},{1}] = max(a[{0},{1}] - (a[{0},0] - 1))\n"
      "| 2:unroll w[{0}] = k[N-1-{0}] > 0 ? i32(-a[{0},{1}*2] * 2) : -k[{0}] / 3\n"
      "1 N t[{0}] += f64(a[{1},3]) < 1 ? 1e-05 : (2 < 3 ? 4 : 5) + 1\n"
      "| | t[0] *= f64(sqrt(abs(a[-{1}+7,0]))) + f64(min(exp(a[{1},1]), 1))\n");
  return out;
}

/// Tokens that the grammar gives meaning to, so insertions reach deeper into the parser.
// clang-format off
const char* const kTokens[] = {
    "|", "| ", "[", "]", "{", "}", "(", ")", ",", ":", "=", "+=", "*=", "max(", "min(",
    "{9}", "{0}", "{1}", "?", " < ", "-", "*", "/", "#", "inf", "1e-5", "\n", "0", "-1", " N ",
    "exp(", "i32(", "f64(", "input ", "temp ", ":vec", ":par", "99999999999999999999", "@",
    "\xc3\x97", "\t", " ", "y[0]", "{0}*{1}", "= 0", " in [0, 1]", ".5", "\r"};
// clang-format on

std::string mutate(std::string s, Rng& rng) {
  const int count = 1 + static_cast<int>(rng.below(3));
  for (int m = 0; m < count; ++m) {
    const size_t n = s.size();
    switch (rng.below(9)) {
      case 0:  // flip one byte to anything
        if (n) s[rng.below(n)] = static_cast<char>(rng.below(256));
        break;
      case 1:  // flip one byte to printable ASCII
        if (n) s[rng.below(n)] = static_cast<char>(32 + rng.below(95));
        break;
      case 2: {  // delete a short span
        if (!n) break;
        const size_t at = rng.below(n);
        s.erase(at, 1 + rng.below(8));
        break;
      }
      case 3:
      case 4: {  // insert a grammar token
        const char* tok = kTokens[rng.below(std::size(kTokens))];
        s.insert(rng.below(n + 1), tok);
        break;
      }
      case 5:  // truncate
        s.resize(rng.below(n + 1));
        break;
      case 6:
      case 7: {  // duplicate, delete or swap whole lines
        std::vector<std::string> lines;
        std::istringstream in(s);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
        if (lines.empty()) break;
        const size_t i = rng.below(lines.size()), j = rng.below(lines.size());
        switch (rng.below(3)) {
          case 0:
            lines.insert(lines.begin() + static_cast<long>(i), lines[j]);
            break;
          case 1:
            lines.erase(lines.begin() + static_cast<long>(i));
            break;
          default:
            std::swap(lines[i], lines[j]);
        }
        s.clear();
        for (const auto& l : lines) s += l + "\n";
        break;
      }
      default: {  // replace a run of digits with an interesting number
        std::vector<size_t> starts;
        for (size_t i = 0; i < n; ++i)
          if (std::isdigit(static_cast<unsigned char>(s[i])) &&
              (i == 0 || !std::isdigit(static_cast<unsigned char>(s[i - 1]))))
            starts.push_back(i);
        if (starts.empty()) break;
        const size_t at = starts[rng.below(starts.size())];
        size_t end = at;
        while (end < n && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        static const char* const kNumbers[] = {
            "0", "1", "2", "3", "7", "65", "4097", "2147483648", "9223372036854775807"};
        s.replace(at, end - at, kNumbers[rng.below(std::size(kNumbers))]);
      }
    }
  }
  return s;
}

/// Why a mutant broke the contract, or "" when it kept it.
std::string contract_violation(const std::string& text) {
  auto r = load_program(text, "fuzz.pdj");
  if (!r.ok()) {
    if (r.errors().empty()) return "rejected without a diagnostic";
    if (r.errors().size() > 51) return "more than 51 diagnostics";
    for (const auto& d : r.errors()) {
      if (d.loc.line <= 0 || d.loc.col <= 0) return "diagnostic without a location: " + d.str();
      if (d.loc.file != "fuzz.pdj") return "diagnostic names another file: " + d.str();
      if (d.message.empty()) return "diagnostic without a message: " + d.str();
    }
    return "";
  }
  const std::string t1 = print_program(*r);
  auto p2 = load_program(t1, "printed.pdj");
  if (!p2.ok())
    return "printed text does not load: " + p2.error_text() + "\n--- printed ---\n" + t1;
  if (!structurally_equal(*r, *p2)) return "printed text parses to a different program:\n" + t1;
  if (print_program(*p2) != t1) return "printing is not a fixed point:\n" + t1;
  if (structural_hash(*r) != structural_hash(*p2)) return "hash changed across the round trip";
  return "";
}

}  // namespace

TEST_CASE("mutated kernels are accepted or rejected with located diagnostics, never worse" *
          doctest::test_suite("slow")) {
  const auto seeds = corpus();
  REQUIRE(seeds.size() >= 2);
  for (const auto& seed : seeds) {
    auto r = load_program(seed);
    REQUIRE_MESSAGE(r.ok(), "every seed must be valid before mutation: " << r.error_text());
  }
  Rng rng(kSeed);
  int accepted = 0, rejected = 0, violations = 0;
  std::string first_violation, first_input;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) {
    const std::string text = mutate(seeds[rng.below(seeds.size())], rng);
    const std::string why = contract_violation(text);
    if (!why.empty()) {
      if (violations++ == 0) first_violation = why, first_input = text;
      continue;
    }
    (load_program(text).ok() ? accepted : rejected)++;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("fuzz: ", accepted, " accepted, ", rejected, " rejected, ", violations, " violations in ",
          seconds, " s");
  INFO("first violation: ", first_violation, "\n--- input ---\n", first_input);
  CHECK(violations == 0);
  // Both paths must be exercised for the test to mean anything.
  CHECK(accepted > kIterations / 50);
  CHECK(rejected > kIterations / 2);
}

TEST_CASE("every truncation of every suite kernel is handled") {
  // Cutting a file at each byte reaches every half-finished construct once.
  int cases = 0, violations = 0;
  std::string first;
  for (const auto& text : corpus()) {
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      const std::string why = contract_violation(text.substr(0, cut));
      ++cases;
      if (!why.empty() && violations++ == 0)
        first = why + "\n--- input ---\n" + text.substr(0, cut);
    }
  }
  INFO("first violation: ", first);
  CHECK(cases > 0);
  CHECK(violations == 0);
}
